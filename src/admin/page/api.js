// The JSON API, the page's one way to read and act. Every change carries the session's CSRF
// token and one Idempotency-Key per intended action, so a double click never acts twice.

let csrfToken = "";
let signedOut = () => {};

export const setCsrfToken = (token) => {
  csrfToken = token ?? "";
};

/** Called when the API answers 401: the session ended. */
export const onSignedOut = (callback) => {
  signedOut = callback;
};

export async function api(method, url, body, idempotencyKey) {
  const headers = { accept: "application/json" };
  if (method !== "GET") headers["x-csrf-token"] = csrfToken;
  if (body !== undefined) headers["content-type"] = "application/json";
  if (idempotencyKey) headers["idempotency-key"] = idempotencyKey;
  let res;
  try {
    res = await fetch(url, { method, headers, body: body === undefined ? undefined : JSON.stringify(body), credentials: "same-origin" });
  } catch {
    return { status: 0, data: { error: "the server could not be reached; check the connection and try again" } };
  }
  const data = await res.json().catch(() => ({}));
  if (res.status === 401) signedOut();
  return { status: res.status, data };
}
