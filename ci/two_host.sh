#!/usr/bin/env bash
# Two hosts on one machine: two network namespaces joined by a veth pair, one MPI job with G
# ranks in each (shared memory inside a host, TCP across the link), running `shardbench run`.
# Owns set-up and teardown (on exit, error and signals) and the per-host environment that lets
# the ranks read their link's counters (SB_LINK_IFACE). Does not interpret the results.
#
#   ci/two_host.sh [--bin PATH] [--ranks-per-node G] [--probe] [--] [shardbench run args...]
#
# --bin: the shardbench binary (default: build/shardbench next to this script). G: ranks per
# host (default 2); the job has 2G ranks, ranks 0..G-1 in host A. --probe: only check that
# namespaces can be created here (exit 0) or say why not (exit 2). Exit 2 also when the mode
# cannot run here (not root, missing iproute2/util-linux/ethtool/mpirun); else shardbench's code.
# Needs: root, iproute2 (ip, tc), util-linux (unshare), ethtool, openmpi-bin (ci/setup.sh).
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
bin="$here/../build/shardbench"
G=2
probe=0
args=()
while (($#)); do
  case "$1" in
    --bin) bin="$2"; shift 2 ;;
    --bin=*) bin="${1#--bin=}"; shift ;;
    --ranks-per-node) G="$2"; shift 2 ;;
    --ranks-per-node=*) G="${1#--ranks-per-node=}"; shift ;;
    --probe) probe=1; shift ;;
    --) shift; args+=("$@"); break ;;
    *) args+=("$1"); shift ;;
  esac
done

cannot() {
  echo "two_host: cannot create two network-namespace hosts here: $*" >&2
  exit 2
}
if ! [[ "$G" =~ ^[1-9][0-9]{0,2}$ ]]; then
  echo "two_host: --ranks-per-node $G: allowed 1..999" >&2
  exit 2
fi
[ "$(id -u)" -eq 0 ] || cannot "needs root (ip netns, veth, mount); run as root"
for tool in ip tc unshare ethtool mpirun; do
  command -v "$tool" >/dev/null 2>&1 ||
    cannot "'$tool' not found in PATH; install iproute2 util-linux ethtool openmpi-bin" \
      "(ci/setup.sh)"
done

# Names unique to this run (interface names: at most 15 characters).
id="$$"
nsA="sb${id}a" nsB="sb${id}b" ifA="sbv${id}a" ifB="sbv${id}b"
subnet_base="10.$((200 + id % 50)).$(((id / 50) % 250))"
subnet="$subnet_base.0/24" ipA="$subnet_base.1" ipB="$subnet_base.2"
work=""

cleanup() {
  local rc=$?
  trap - EXIT INT TERM HUP
  for ns in "$nsA" "$nsB"; do
    [ -e "/run/netns/$ns" ] || continue
    local pids
    pids="$(ip netns pids "$ns" 2>/dev/null || true)"
    [ -n "$pids" ] && kill -TERM $pids 2>/dev/null || true
  done
  for _ in 1 2 3 4 5 6 7 8 9 10; do  # up to 1 s for the ranks to go, then SIGKILL
    local left=""
    for ns in "$nsA" "$nsB"; do
      [ -e "/run/netns/$ns" ] && left+="$(ip netns pids "$ns" 2>/dev/null || true)"
    done
    [ -z "$left" ] && break
    sleep 0.1
  done
  for ns in "$nsA" "$nsB"; do
    if [ -e "/run/netns/$ns" ]; then
      local pids
      pids="$(ip netns pids "$ns" 2>/dev/null || true)"
      [ -n "$pids" ] && kill -KILL $pids 2>/dev/null || true
      ip netns del "$ns" 2>/dev/null || true  # takes its end of the veth pair (and the pair) along
    fi
    rm -rf "/etc/netns/$ns"
  done
  [ -n "$work" ] && rm -rf "$work"
  exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM
trap 'exit 129' HUP

ip netns add "$nsA" 2>/dev/null || cannot "'ip netns add' failed (no network-namespace support?)"
ip netns add "$nsB" 2>/dev/null || cannot "'ip netns add' failed (no network-namespace support?)"
ip link add "$ifA" netns "$nsA" type veth peer name "$ifB" netns "$nsB" 2>/dev/null ||
  cannot "'ip link add ... type veth' failed (no veth driver?)"
if ((probe)); then
  echo "two_host: network namespaces and veth pairs can be created here"
  exit 0
fi
[ -x "$bin" ] || { echo "two_host: $bin: not an executable; build shardbench first" >&2; exit 2; }

# Quiet, deterministic link: no IPv6 (no DAD/MLD chatter), static neighbours (no ARP), segments
# as the wire would carry them (no TSO) merged on receive (GRO), a plain FIFO queue.
mac() { ip -n "$1" -o link show "$2" | sed -n 's/.*link\/ether \([0-9a-f:]*\).*/\1/p'; }
macA="$(mac "$nsA" "$ifA")" macB="$(mac "$nsB" "$ifB")"
setup_host() {  # ns iface my_ip peer_ip peer_mac
  ip -n "$1" link set lo up
  ip netns exec "$1" sysctl -qw "net.ipv6.conf.$2.disable_ipv6=1"
  ip netns exec "$1" ethtool -K "$2" tso off gro on >/dev/null 2>&1 ||
    echo "two_host: warning: ethtool -K $2 tso off gro on failed; link counts will be noisier" >&2
  ip -n "$1" addr add "$3/24" dev "$2"
  ip -n "$1" link set "$2" up
  ip netns exec "$1" tc qdisc replace dev "$2" root pfifo
  ip -n "$1" neigh replace "$4" lladdr "$5" dev "$2" nud permanent
  mkdir -p "/etc/netns/$1"  # `ip netns exec` binds this over /etc/hosts for the host's processes
  printf '127.0.0.1 localhost\n%s %s\n%s %s\n' "$ipA" "$nsA" "$ipB" "$nsB" >"/etc/netns/$1/hosts"
}
setup_host "$nsA" "$ifA" "$ipA" "$ipB" "$macB"
setup_host "$nsB" "$ifB" "$ipB" "$ipA" "$macA"

# Every process of a host runs under its own hostname and a private /dev/shm: with a shared
# hostname, vader's segment names of the two hosts collide (NETNS.md).
work="$(mktemp -d /tmp/sb-two-host.XXXXXX)"
cat >"$work/enter_host.sh" <<EOF
#!/bin/sh
# enter_host.sh <ns> <command...>: runs the command as a process of host <ns>.
ns="\$1"; shift
case "\$ns" in
  $nsA) iface=$ifA ;;
  $nsB) iface=$ifB ;;
  *) echo "enter_host: unknown host \$ns" >&2; exit 1 ;;
esac
exec ip netns exec "\$ns" unshare --uts --mount --propagation private sh -c '
  hostname "\$0" && mount -t tmpfs -o mode=1777 sbshm /dev/shm && SB_LINK_IFACE="\$1" &&
  export SB_LINK_IFACE && shift && exec "\$@"' "\$ns" "\$iface" "\$@"
EOF
# mpirun's rsh launcher calls the agent as `agent <host> <orted command words...>`, the words
# meant for a remote shell: join them and hand them to sh, as ssh would.
cat >"$work/rsh_agent.sh" <<EOF
#!/bin/sh
host="\$1"; shift
exec "$work/enter_host.sh" "\$host" sh -c "\$*"
EOF
chmod +x "$work/enter_host.sh" "$work/rsh_agent.sh"

export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
mpirun_args=(mpirun -np $((2 * G)) --host "$nsA:$G,$nsB:$G" --map-by slot --bind-to none
             --oversubscribe
             --mca plm_rsh_agent "$work/rsh_agent.sh"
             --mca pml ob1 --mca btl self,vader,tcp
             --mca btl_tcp_if_include "$subnet" --mca oob_tcp_if_include "$subnet"
             --mca mpi_yield_when_idle 1
             -x OPENBLAS_NUM_THREADS=1
             "$bin" run --ranks-per-node "$G" "${args[@]}")
echo "two_host: hosts $nsA ($ipA, $ifA) and $nsB ($ipB, $ifB) on $subnet, $G rank(s) each" >&2
# Not exec: the EXIT trap must run after the job.
set +e
"$work/enter_host.sh" "$nsA" "${mpirun_args[@]}" &
job=$!
wait "$job"
rc=$?
set -e
exit "$rc"
