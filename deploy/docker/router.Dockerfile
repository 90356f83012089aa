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
# All interfaces and port 30000 unless a flag, KVROUTE_HOST / KVROUTE_PORT or the config file
# says otherwise: these defaults rank below all of them (KVROUTE_HOST / KVROUTE_PORT here would
# override host: and port: in a mounted --config file).
ENV NODE_ENV=production KVROUTE_DEFAULT_HOST=0.0.0.0 KVROUTE_DEFAULT_PORT=30000
# The image's unprivileged user (uid 1000), as the Helm chart's securityContext expects.
USER node
EXPOSE 30000
# The router is the container's only listener: probe /liveness on each port listening in the
# container's network namespace, so the check follows --port, KVROUTE_PORT or port: alike.
HEALTHCHECK --interval=10s --timeout=3s --start-period=10s --retries=3 \
  CMD ["node", "-e", "const fs=require('fs');const t=[];for(const f of ['tcp','tcp6']){let x='';try{x=fs.readFileSync('/proc/net/'+f,'utf8')}catch{}for(const l of x.split('\\n').slice(1)){const c=l.trim().split(/\\s+/);if(c[3]!=='0A')continue;const [a,p]=c[1].split(':');const h=f==='tcp6'?'[::1]':/^0+$/.test(a)?'127.0.0.1':(a.match(/../g)||[]).reverse().map(b=>parseInt(b,16)).join('.');t.push('http://'+h+':'+parseInt(p,16)+'/liveness')}}Promise.any(t.map(u=>fetch(u,{signal:AbortSignal.timeout(2500)}).then(r=>{if(!r.ok)throw 0}))).then(()=>process.exit(0),()=>process.exit(1))"]
ENTRYPOINT ["node", "/app/kvroute-router.mjs"]
