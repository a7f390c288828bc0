#!/bin/bash
# How close to the floor responder can the daemon's shell come with no core at all?
# Builds this checkout with shell-answers-alone.patch applied (the shell answers
# ADD_MAPPING with mapped = local and drops REMOVE_MAPPING itself; everything else still
# goes to the core) in a throw-away worktree, then runs the rig comparison with that
# binary as "ours". Not a daemon anyone should run: it keeps no mappings.
#
# Usage: tests/rig/experiments/shell-alone.sh [compare.sh options, default --no-2vm --no-profile]
# Results: target/rig/compare.txt as for compare.sh ("ours" is the experiment).
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO="$(cd "$HERE/../../.." && pwd)"
WT=$(mktemp -d /tmp/iwpm-shell-alone.XXXXXX)
trap 'git -C "$REPO" worktree remove --force "$WT" 2>/dev/null || rm -rf "$WT"' EXIT
git -C "$REPO" worktree add --detach "$WT" HEAD > /dev/null
git -C "$WT" apply "$HERE/shell-answers-alone.patch"
(cd "$WT" && CARGO_TARGET_DIR="$REPO/target/shell-alone" cargo build --release -p iwpmd >&2)
[ $# -gt 0 ] || set -- --no-2vm --no-profile
"$REPO/tests/rig/compare.sh" --daemon "$REPO/target/shell-alone/release/iwpmd" "$@"
