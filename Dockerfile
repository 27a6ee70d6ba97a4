# syntax=docker/dockerfile:1
# One image for every role: `docker run IMAGE` is `npm start` (migrate, then web + worker);
# `docker run IMAGE web | worker | migrate` runs one (compose.yaml runs them apart).
# Our machines cannot run Docker: test/image-steps.test.ts replays these steps without it
# (the COPY lines, the RUN lines, the migrate and default commands, the HEALTHCHECK), so a
# change here is tested like code. Keep to instructions that test knows.

ARG NODE_VERSION=24

# --- build: the Prisma client generated and src/ compiled to dist/ (dev tools: prisma, tsc) --
FROM node:${NODE_VERSION}-slim AS build
WORKDIR /app
COPY package.json package-lock.json ./
# Install scripts stay off, as npm 11 keeps them on our machines: nothing here needs them.
RUN --mount=type=cache,target=/root/.npm npm ci --ignore-scripts --no-audit --no-fund
COPY prisma.config.ts tsconfig.json tsconfig.build.json ./
COPY prisma ./prisma
COPY scripts/build.mjs ./scripts/
COPY src ./src
RUN npm run build

# --- runtime: production dependencies, the compiled dist/, the migrations -------------------
FROM node:${NODE_VERSION}-slim AS runtime
WORKDIR /app
# Plain node runs dist/: no TypeScript loader at run time (tsx is a dev dependency). npm keeps
# the Prisma CLI too, an optional peer of @prisma/client; unused here.
COPY package.json package-lock.json ./
RUN --mount=type=cache,target=/root/.npm npm ci --omit=dev --ignore-scripts --no-audit --no-fund
COPY prisma ./prisma
# dist is a link to the build (scripts/build.mjs); COPY copies the folder it links to.
COPY --from=build /app/dist ./dist
# The files stay root's and read-only to the app.
USER node
EXPOSE 3000 9464
# Alive: the web port's /healthz, else (a worker has no web port) the metrics listener's.
HEALTHCHECK --interval=15s --timeout=5s --start-period=30s --retries=3 \
  CMD ["node", "-e", "const ports = [process.env.PORT || 3000, process.env.METRICS_PORT || 9464]; const alive = (p) => fetch('http://127.0.0.1:' + p + '/healthz', { signal: AbortSignal.timeout(4000) }).then((r) => r.ok, () => false); (async () => { for (const p of ports) if (await alive(p)) process.exit(0); process.exit(1); })();"]
# node itself is PID 1 and traps SIGTERM (src/main.ts drains before it exits); no shell between.
ENTRYPOINT ["node", "dist/main.js"]
CMD ["all", "--migrate"]
