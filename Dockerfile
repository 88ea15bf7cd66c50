# orq: one image for every role (`orq start --roles …`) and the dashboard (`orq dashboard`).
# docker-compose.yml runs it; see docs/docker-compose.md.

# --- build: install everything, compile, then drop the dev dependencies -----------------------
FROM node:24-slim AS build
WORKDIR /app
COPY package.json package-lock.json ./
RUN npm ci --no-audit --no-fund
COPY tsconfig.json tsconfig.build.json ./
COPY scripts ./scripts
COPY src ./src
RUN npm run build && npm prune --omit=dev --no-audit --no-fund

# --- runtime: compiled code and production dependencies only, as the unprivileged node user ---
FROM node:24-slim AS runtime
ENV NODE_ENV=production
# What the command executor's coding agents need (docs/executors.md#in-a-container): git for the
# task worktrees and commits, ca-certificates for the agent CLIs' HTTPS calls, bubblewrap (bwrap)
# for the sandbox some of them run their tools in.
RUN apt-get update \
  && apt-get install -y --no-install-recommends git ca-certificates bubblewrap \
  && rm -rf /var/lib/apt/lists/*
WORKDIR /app
COPY --from=build /app/package.json /app/package-lock.json ./
COPY --from=build /app/node_modules ./node_modules
COPY --from=build /app/dist ./dist
COPY schema ./schema
# Scenario files, so `--session-config '{"llm":{"scenario":"/app/examples/scenarios/…"}}'` works.
COPY examples ./examples
# What orq writes, relative to the working directory /app, which stays root-owned:
# execution.workspaceRoot (.orq/workspaces), llm.record.path (.orq/llm-recordings) and, with
# planning.history.storage_type jsonl, planning.history.directory (planning_history).
# Made here, as root and before VOLUME (later changes to it are discarded): a new named volume
# mounted on /app/.orq starts as a copy of it, owner included.
RUN mkdir -p /app/.orq /app/planning_history && chown node:node /app/.orq /app/planning_history
VOLUME ["/app/.orq"]
USER node
ENTRYPOINT ["node", "dist/producers/cli/main.js"]
CMD ["--help"]
