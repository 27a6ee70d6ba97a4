// The loopback server lives with the simulators the demo ships (sim/); the fakes use the same one.
export { LocalServer, LocalService, sendJson } from "../../sim/local-server.ts";
