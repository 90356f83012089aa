# syntax=docker/dockerfile:1
# kvroute-mock-worker image (a GPU-free SGLang/OpenAI-compatible worker). Build from the
# repository root:
#   docker build -f deploy/docker/mock-worker.Dockerfile -t kvroute-mock-worker:0.1.0 .
# The runtime stage holds node, the worker's esbuild bundle (the same file
# `pnpm --filter @kvroute/mock-worker bundle` writes) and zeromq beside it: a native addon the
# bundle loads only to publish KV events (--kv-events-config), from its prebuilt binaries.
ARG NODE_IMAGE=node:22-bookworm-slim

FROM ${NODE_IMAGE} AS build
WORKDIR /src
RUN npm install -g pnpm@12.4.2
COPY . .
RUN pnpm install --frozen-lockfile && pnpm --filter @kvroute/mock-worker bundle
# The version apps/mock-worker/package.json pins.
RUN mkdir /zmq && cd /zmq && npm init -y >/dev/null && \
    npm install --omit=dev --ignore-scripts --no-audit --no-fund zeromq@6.8.0

FROM ${NODE_IMAGE}
WORKDIR /app
COPY --from=build /src/apps/mock-worker/bundle/kvroute-mock-worker.mjs /app/kvroute-mock-worker.mjs
COPY --from=build /zmq/node_modules /app/node_modules
ENV NODE_ENV=production
USER node
EXPOSE 30001
HEALTHCHECK --interval=10s --timeout=3s --start-period=10s --retries=3 \
  CMD ["node", "-e", "fetch('http://127.0.0.1:30001/health').then(r=>process.exit(r.ok?0:1),()=>process.exit(1))"]
ENTRYPOINT ["node", "/app/kvroute-mock-worker.mjs", "--host", "0.0.0.0", "--port", "30001"]
