# syntax=docker/dockerfile:1
# kvroute-router image. Build from the repository root:
#   docker build -f deploy/docker/router.Dockerfile -t kvroute-router:0.1.0 .
# The runtime stage holds node, the router's esbuild bundle (the same file
# `pnpm --filter @kvroute/router bundle` writes) and zeromq beside it: a native addon the
# bundle loads only when KV events are configured (--kv-events-endpoint), from its prebuilt
# binaries (no compiler in the image).
ARG NODE_IMAGE=node:22-bookworm-slim

FROM ${NODE_IMAGE} AS build
WORKDIR /src
RUN npm install -g pnpm@12.4.2
COPY . .
RUN pnpm install --frozen-lockfile && pnpm --filter @kvroute/router bundle
# The version apps/router/package.json pins.
RUN mkdir /zmq && cd /zmq && npm init -y >/dev/null && \
    npm install --omit=dev --ignore-scripts --no-audit --no-fund zeromq@6.8.0

FROM ${NODE_IMAGE}
WORKDIR /app
COPY --from=build /src/apps/router/bundle/kvroute-router.mjs /app/kvroute-router.mjs
COPY --from=build /zmq/node_modules /app/node_modules
ENV NODE_ENV=production KVROUTE_HOST=0.0.0.0 KVROUTE_PORT=30000
# The image's unprivileged user (uid 1000), as the Helm chart's securityContext expects.
USER node
EXPOSE 30000
HEALTHCHECK --interval=10s --timeout=3s --start-period=10s --retries=3 \
  CMD ["node", "-e", "fetch('http://127.0.0.1:'+process.env.KVROUTE_PORT+'/liveness').then(r=>process.exit(r.ok?0:1),()=>process.exit(1))"]
ENTRYPOINT ["node", "/app/kvroute-router.mjs"]
