// The loopback server lives with the simulators the demo ships (src/demo/); the fakes use the same one.
export { LocalServer, sendJson } from "../../src/demo/local-server.ts";
