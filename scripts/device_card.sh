# Sourced from the repository root by a device call's script: prints the card's name and defines `only_on
# PATTERN`, which ends the call at once (exit 0) on any other card, so a call timed for one card spends no device
# time on another (a call that asks for an H200 may be given an H100).
card=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -n 1)
echo "$card"
only_on() {
  case "$card" in *"$1"*) ;; *) echo "not an $1: nothing run"; exit 0 ;; esac
}
