// The proxied POST routes as a fastify plugin. Real sockets reach the handler before fastify's
// routing (router.ts's serverFactory); these routes exist so app.inject(), 404s and route
// listings see the same paths, and they hand the raw request and response to the same handler.
import { REQUEST_PATHS, type RequestKind } from '@kvroute/protocol';
import type { FastifyInstance } from 'fastify';
import type { ProxyHandler } from './route.ts';

export interface ProxyPluginOptions {
  handler: ProxyHandler;
}

export async function proxyPlugin(app: FastifyInstance, opts: ProxyPluginOptions): Promise<void> {
  const serve = opts.handler;
  for (const [kind, path] of Object.entries(REQUEST_PATHS) as [RequestKind, string][]) {
    app.post(
      path,
      {
        // The proxy path reads the body itself and answers on the raw response: fastify's body
        // parsing and reply lifecycle cost about a quarter of the router's CPU per request.
        onRequest: (req, reply, done) => {
          reply.hijack();
          done();
          void serve(req.raw, reply.raw, kind, path);
        },
      },
      async () => {},
    );
  }
}
