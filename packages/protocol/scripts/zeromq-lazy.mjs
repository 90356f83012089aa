// Stand-in for `zeromq` in the single-file bundles (esbuild --alias:zeromq=...). zeromq is a
// native addon that cannot be bundled, and loading it at start would stop a bundle on a host
// without node_modules even when no KV events are configured. This loads the real package
// from node_modules the first time a socket is made, so the bundle starts without it and KV
// events work where zeromq is installed beside the bundle.
import { createRequire } from 'node:module';

let real;
function zeromq() {
  if (!real) {
    try {
      real = createRequire(import.meta.url)('zeromq');
    } catch (err) {
      throw new Error(
        `KV events need the zeromq package installed beside this bundle (npm i zeromq@6): ${err.message}`,
      );
    }
  }
  return real;
}

// Regular functions, not arrows: callers construct sockets with `new`, and a function called
// with `new` that returns an object yields that object (an arrow cannot be called with new).
function lazy(name) {
  return function LazySocket(...args) {
    return new (zeromq()[name])(...args);
  };
}

export const Subscriber = lazy('Subscriber');
export const Dealer = lazy('Dealer');
export const Publisher = lazy('Publisher');
export const Router = lazy('Router');
