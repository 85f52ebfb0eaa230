#!/usr/bin/env bash
# Call 1: the twenty-second session's prepared call, run as it was (after `git apply s22_calls/two_warpgroups.patch`).
exec bash "$(dirname "$0")/../s22_calls/next_wg.sh"
