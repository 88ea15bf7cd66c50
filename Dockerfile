# orq: one image for every role (`orq start --roles …`) and the dashboard (`orq dashboard`).
# docker-compose.yml runs it; see "Running orq with Docker Compose" in the README.

# --- build: install everything, compile, then drop the dev dependencies -----------------------
FROM node:20-slim AS build
WORKDIR /app
COPY package.json package-lock.json ./
RUN npm ci --no-audit --no-fund
COPY tsconfig.json tsconfig.build.json ./
COPY scripts ./scripts
COPY src ./src
RUN npm run build && npm prune --omit=dev --no-audit --no-fund

# --- runtime: compiled code and production dependencies only, as the unprivileged node user ---
FROM node:20-slim AS runtime
ENV NODE_ENV=production
WORKDIR /app
COPY --from=build /app/package.json /app/package-lock.json ./
COPY --from=build /app/node_modules ./node_modules
COPY --from=build /app/dist ./dist
COPY schema ./schema
# Scenario files, so `--session-config '{"llm":{"scenario":"/app/examples/scenarios/…"}}'` works.
COPY examples ./examples
USER node
ENTRYPOINT ["node", "dist/producers/cli/main.js"]
CMD ["--help"]
