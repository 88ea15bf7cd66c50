#!/usr/bin/env bash
# Builds the tests' two local images from this machine's own Debian files, for a Docker engine
# that reaches no registry (CI): no base image to pull, about a second each.
#   orq-test-redis:local  redis-server and the libraries it loads (tests/support/test-redis.ts)
#   orq-test-node:local   node, git and a shell: the command executor in a container, as a pod
#                         runs it (tests/e2e/command-in-container.test.ts)
# Each is a root filesystem of the files themselves and the libraries `ldd` lists, passed to
# `docker import`. Usage: scripts/test-images.sh [redis|node]... (both when none is named).
set -euo pipefail

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# Copies a file into the root filesystem under the same path, with the libraries it loads.
add() {
  local root=$1 path=$2
  mkdir -p "$root$(dirname "$path")"
  cp -L "$path" "$root$path"
  add_libs "$root" "$path"
}

add_libs() {
  local root=$1 path=$2
  if file_is_elf "$path"; then
    ldd "$path" 2>/dev/null | grep -o '/[^ ]*' | while read -r lib; do
      [ -e "$root$lib" ] || { mkdir -p "$root$(dirname "$lib")" && cp -L "$lib" "$root$lib"; }
    done
  fi
}

file_is_elf() { [ "$(head -c 4 "$1" | tail -c 3)" = ELF ]; }

# Debian's merged /usr: /bin, /lib and /lib64 are links into /usr, as on the host.
new_root() {
  local root=$work/$1
  mkdir -p "$root"/{usr/bin,usr/lib,usr/lib64,etc,tmp,data}
  ln -s usr/bin "$root/bin"
  ln -s usr/lib "$root/lib"
  ln -s usr/lib64 "$root/lib64"
  chmod 1777 "$root/tmp"
  add "$root" /usr/bin/dash
  ln -s dash "$root/usr/bin/sh"
  echo "$root"
}

import() {
  local root=$1 tag=$2
  shift 2
  tar -C "$root" -c . | docker import --change 'LABEL orq.test.image=1' \
    --change 'ENV PATH=/usr/local/bin:/usr/bin:/bin' "$@" - "$tag" >/dev/null
  echo "built $tag"
  # The image this tag named before, now untagged: gone, so that each CI run leaves none.
  docker image prune -f --filter label=orq.test.image=1 >/dev/null
}

build_redis() {
  local root
  root=$(new_root redis)
  # Redis picks its mode from the program's name: /usr/bin/redis-server is a link to
  # redis-check-rdb, so the file is copied under the server's name.
  add "$root" /usr/bin/redis-server
  import "$root" orq-test-redis:local --change 'WORKDIR /data' --change 'CMD ["redis-server"]'
}

build_node() {
  local root
  root=$(new_root node)
  add "$root" "$(command -v node)"
  for f in /usr/bin/git /usr/bin/env /usr/bin/cat /usr/bin/ls /usr/bin/id /usr/bin/mkdir /usr/bin/rm; do
    add "$root" "$f"
  done
  # git runs its helpers (worktree, merge...) from git-core, and copies its templates on init.
  # Copied whole (its commands are hard links to one file), then the libraries they load.
  cp -a /usr/lib/git-core "$root/usr/lib/"
  for f in /usr/lib/git-core/*; do [ -f "$f" ] && [ ! -L "$f" ] && add_libs "$root" "$f"; done
  mkdir -p "$root/usr/share/git-core" && cp -a /usr/share/git-core/templates "$root/usr/share/git-core/"
  cp -a /etc/ssl "$root/etc/" 2>/dev/null || true
  # As node:24-slim: root and node (1000), whose HOME holds no git config. No /etc/gitconfig.
  printf 'root:x:0:0:root:/root:/bin/sh\nnode:x:1000:1000::/home/node:/bin/sh\n' >"$root/etc/passwd"
  printf 'root:x:0:\nnode:x:1000:\n' >"$root/etc/group"
  mkdir -p "$root/root" "$root/home/node"
  chown 1000:1000 "$root/home/node"
  import "$root" orq-test-node:local --change 'ENV HOME=/home/node' --change 'USER node' \
    --change 'CMD ["node"]'
}

for image in "${@:-redis node}"; do
  for name in $image; do
    case $name in
      redis) build_redis ;;
      node) build_node ;;
      *) echo "unknown image: $name (redis or node)" >&2 && exit 2 ;;
    esac
  done
done
