#!/usr/bin/env bash
# The CI close sequence, run from the root of a checkout whose tracker lives in
# .beads/issues.jsonl: import it into a throwaway database, close the tasks whose
# evidence holds (re-validated here, signatures required), export the tracker
# again and commit it. Pushing is left to the caller (the workflow), never done here.
#
# Env: MESH_PLAN_LABEL (scope, required), MESH_SIGNING_KEY (required by
# --require-signed), MESH_ACTOR (default mesh-ci), MESH_CI_DB (default: a temp file).
set -euo pipefail
: "${MESH_PLAN_LABEL:?set MESH_PLAN_LABEL to the plan label to close}"
db="${MESH_CI_DB:-$(mktemp -d)/mesh.db}"
actor="${MESH_ACTOR:-mesh-ci}"

mesh --db "$db" tracker init >/dev/null
mesh --db "$db" tracker import .beads/issues.jsonl
status=0
mesh --db "$db" --actor "$actor" ci-close --label "$MESH_PLAN_LABEL" --revalidate --require-signed || status=$?
mesh --db "$db" tracker export -o .beads/issues.jsonl
git add .beads/issues.jsonl
if ! git diff --cached --quiet; then
  git commit -q -m "mesh ci-close: tracker update" -m "Closed by mesh ci-close after re-validation."
fi
exit "$status"
