// The floor any Node.js proxy pays, for the proxy benchmark: node:http in front, undici's
// dispatch (the router's own client API) behind, the body buffered and the worker's answer
// passed through. No routing, validation, accounting, metrics or logging: what kvroute costs
// above this is its own code; what this costs above nginx is the runtime's.
//
//   node bench/node-floor-proxy.mjs --worker-url http://127.0.0.1:PORT
import { createServer } from 'node:http';
import { Agent } from 'undici';

const at = process.argv.indexOf('--worker-url');
const worker = at > 0 ? process.argv[at + 1] : undefined;
if (!worker) {
  console.error('usage: node-floor-proxy.mjs --worker-url URL');
  process.exit(2);
}
const origin = new URL(worker).origin;
const agent = new Agent({ keepAliveTimeout: 30_000, pipelining: 1 });

class Answer {
  constructor(res) {
    this.res = res;
    this.status = 0;
    this.type = 'application/json';
    this.chunks = [];
  }
  onConnect() {}
  onHeaders(status, rawHeaders) {
    this.status = status;
    for (let i = 0; i + 1 < rawHeaders.length; i += 2) {
      if (rawHeaders[i].toString('latin1').toLowerCase() === 'content-type') {
        this.type = rawHeaders[i + 1].toString('latin1');
      }
    }
    return true;
  }
  onData(chunk) {
    // Streams go out as they come; a plain body is sent whole with its length.
    if (this.type.startsWith('text/event-stream')) {
      if (!this.res.headersSent) this.res.writeHead(this.status, { 'content-type': this.type });
      return this.res.write(chunk);
    }
    this.chunks.push(chunk);
    return true;
  }
  onComplete() {
    if (this.res.headersSent) {
      this.res.end();
      return;
    }
    const body = this.chunks.length === 1 ? this.chunks[0] : Buffer.concat(this.chunks);
    this.res.writeHead(this.status, {
      'content-type': this.type,
      'content-length': String(body.length),
    });
    this.res.end(body);
  }
  onError() {
    if (this.res.headersSent) this.res.destroy();
    else {
      this.res.writeHead(502);
      this.res.end();
    }
  }
}

const server = createServer((req, res) => {
  const chunks = [];
  req.on('data', (c) => chunks.push(c));
  req.on('end', () => {
    const body = chunks.length === 1 ? chunks[0] : Buffer.concat(chunks);
    agent.dispatch(
      {
        origin,
        path: req.url,
        method: req.method,
        headers: { 'content-type': 'application/json', 'content-length': String(body.length) },
        body,
        headersTimeout: 0,
        bodyTimeout: 0,
      },
      new Answer(res),
    );
  });
});
server.keepAliveTimeout = 72_000;
server.listen(0, '127.0.0.1', () => {
  console.log(`node floor proxy listening on http://127.0.0.1:${server.address().port}`);
});
process.on('SIGTERM', () => process.exit(0));
