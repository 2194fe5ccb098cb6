// Preloaded (`node --require`) into the conformance suite (tests/mcp/client_conformance_test.py):
// its scenario servers listen on every interface (`listen(0)`); test servers listen on loopback
// only. Unlike loopback.cjs, the address is bound at once, as `listen(0)` without a host does:
// the suite reads `server.address().port` right after listen(), and a host given to listen() is
// looked up asynchronously (dns.lookup, even for an IP address), so the address would still be
// null. The lookup of "127.0.0.1" is answered synchronously; every other lookup is left alone.
const dns = require("dns");
const net = require("net");
const lookup = dns.lookup;
dns.lookup = function (host, ...args) {
  const cb = args[args.length - 1];
  if (host === "127.0.0.1" && typeof cb === "function") {
    const all = typeof args[0] === "object" && args[0] !== null && args[0].all;
    return all ? cb(null, [{ address: host, family: 4 }]) : cb(null, host, 4);
  }
  return lookup.call(this, host, ...args);
};
const listen = net.Server.prototype.listen;
net.Server.prototype.listen = function (...args) {
  if (typeof args[0] === "number" || typeof args[0] === "string") {
    const cb = args.find((a) => typeof a === "function");
    return listen.call(this, Number(args[0]), "127.0.0.1", cb);
  }
  return listen.apply(this, args);
};
