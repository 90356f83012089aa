#!/usr/bin/env bash
# Run by `pnpm test` before anything else: installs the system tools the tests use when they
# are missing and this is root with apt-get (a fresh Debian machine), so the README's test
# command works on its own. Today that is promtool (Debian's prometheus package), which checks
# the alert rules, dashboard queries and a live /metrics. The Python worker's packages are
# installed by its own test script. Where nothing can be installed, it says which tests will
# fail and why, and carries on.
set -uo pipefail
if ! command -v promtool >/dev/null 2>&1; then
  if command -v apt-get >/dev/null 2>&1 && [ "$(id -u)" = 0 ]; then
    log="${TMPDIR:-/tmp}/kvroute-test-setup-apt.log"
    echo "test setup: installing prometheus (promtool) with apt-get (log: $log)"
    (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq prometheus) >"$log" 2>&1 \
      || echo "test setup: apt-get install prometheus failed (see $log); test/deploy.test.ts's promtool checks will fail" >&2
  else
    echo "test setup: promtool not found and cannot install it (needs root + apt-get: apt-get install prometheus); test/deploy.test.ts's promtool checks will fail" >&2
  fi
fi
exit 0
