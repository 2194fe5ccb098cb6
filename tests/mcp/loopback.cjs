// Preloaded (`node --require`) into server-everything's streamableHttp mode for the tests: that
// server listens on every interface (app.listen(PORT)); test servers listen on loopback only.
const net = require("net");
const listen = net.Server.prototype.listen;
net.Server.prototype.listen = function (...args) {
  if (typeof args[0] === "number" || typeof args[0] === "string") {
    const cb = args.find((a) => typeof a === "function");
    return listen.call(this, Number(args[0]), "127.0.0.1", cb);
  }
  return listen.apply(this, args);
};
