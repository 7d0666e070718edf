#!/bin/sh
# mpirun's "ssh" into a simulated host (tests/python/harness/netns_harness.py):
#   mpirun --mca plm_rsh_agent tests/netns/rsh_agent.sh --host 10.231.0.1:2,10.231.0.2:2 ...
# OpenMPI calls it as `rsh_agent.sh [ssh options] <host> <command words...>`, exactly as it
# would call ssh; the command (an orted launch line with shell syntax: PATH=...; export ...) runs
# in <host>'s network namespace under /bin/sh, with the namespace's name as its hostname (its own
# UTS namespace), as ssh would run it on a real host.
#
# <host> -> namespace: COLLOPS_NETNS_HOSTS="10.231.0.1=collops-123-h0,10.231.0.2=collops-123-h1"
# (set by the harness; mpirun passes its environment to the agent), else the collops-* namespace
# that owns the address, else the name itself when it is a namespace. Never falls back to
# running the command outside a namespace: an unknown host is an error.
set -eu

# Skip ssh-style options OpenMPI may put before the host (e.g. -x, -o Opt=v): none take effect.
while [ $# -gt 0 ]; do
  case "$1" in
    -o|-l|-p|-i) shift 2 ;;
    -*) shift ;;
    *) break ;;
  esac
done
if [ $# -lt 2 ]; then
  echo "rsh_agent.sh: usage: rsh_agent.sh <host> <command...>" >&2
  exit 2
fi
host=$1
shift

ns=""
old_ifs=$IFS
IFS=,
for pair in ${COLLOPS_NETNS_HOSTS:-}; do
  if [ "${pair%%=*}" = "$host" ]; then
    ns=${pair#*=}
  fi
done
IFS=$old_ifs
if [ -z "$ns" ]; then
  for cand in $(ip netns list | awk '{print $1}'); do
    case "$cand" in
      collops-*)
        if ip -n "$cand" -o -4 addr show | grep -q " inet $host/"; then
          ns=$cand
          break
        fi
        ;;
    esac
  done
fi
if [ -z "$ns" ] && ip netns list | awk '{print $1}' | grep -qx "$host"; then
  ns=$host
fi
if [ -z "$ns" ]; then
  echo "rsh_agent.sh: no network namespace for host '$host' (COLLOPS_NETNS_HOSTS='${COLLOPS_NETNS_HOSTS:-}')" >&2
  exit 255
fi

# ssh joins its command words with spaces and hands the line to the remote shell; so do we.
exec ip netns exec "$ns" unshare --uts /bin/sh -c 'hostname "$0" && exec /bin/sh -c "$1"' "$ns" "$*"
