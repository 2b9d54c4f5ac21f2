#!/usr/bin/env bash
# Hosts on one machine: H network namespaces, each joined to one bridge (in a namespace of its
# own) by a veth pair, one MPI job with G ranks in each host (shared memory inside a host, TCP
# across the bridge), running `shardbench run`. Optionally shapes every inter-host path with
# tc (tbf on both ends of every veth for the rate, netem on the host end for delay) and checks
# the shaping with a timed transfer (ci/link_probe.py) before the job; the measured link goes
# to the ranks as a JSON file (SB_HOSTS_NETWORK), which they record as the results' topology
# and use as the prediction's inter-node link. Owns set-up and teardown (on exit, error and
# signals) and the per-host environment that lets the ranks read their link's counters
# (SB_LINK_IFACE). Does not interpret the results.
#
#   ci/two_host.sh [--bin PATH] [--hosts H] [--ranks-per-node G] [--inter-gbps R]
#                  [--inter-latency-ms L] [--probe] [--] [shardbench run args...]
#
# --bin: the shardbench binary (default: build/shardbench next to this script). H: hosts
# (default 2, 2..64); G: ranks per host (default 2); the job has H*G ranks, host h holds ranks
# hG..hG+G-1. R: the rate of every host's link in Gb/s (1e9 bit/s) each way (default:
# unshaped); L: one-way delay in ms (needs sch_netem). --probe: only check that namespaces
# can be created here (exit 0) or say why not (exit 2). Exit 2 also when the mode cannot run
# here (not root, missing tools, a kernel without the qdisc asked for, a rate the link does
# not reach within SB_INTER_RATE_TOLERANCE, default 0.10); else shardbench's code.
# Needs: root, iproute2 (ip, tc, bridge), util-linux (unshare), ethtool, python3, openmpi-bin.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
bin="$here/../build/shardbench"
H=2
G=2
gbps=""
lat_ms=""
probe=0
args=()
while (($#)); do
  case "$1" in
    --bin) bin="$2"; shift 2 ;;
    --bin=*) bin="${1#--bin=}"; shift ;;
    --hosts) H="$2"; shift 2 ;;
    --hosts=*) H="${1#--hosts=}"; shift ;;
    --ranks-per-node) G="$2"; shift 2 ;;
    --ranks-per-node=*) G="${1#--ranks-per-node=}"; shift ;;
    --inter-gbps) gbps="$2"; shift 2 ;;
    --inter-gbps=*) gbps="${1#--inter-gbps=}"; shift ;;
    --inter-latency-ms) lat_ms="$2"; shift 2 ;;
    --inter-latency-ms=*) lat_ms="${1#--inter-latency-ms=}"; shift ;;
    --probe) probe=1; shift ;;
    --) shift; args+=("$@"); break ;;
    *) args+=("$1"); shift ;;
  esac
done

cannot() {
  echo "two_host: cannot create network-namespace hosts here: $*" >&2
  exit 2
}
refuse() {  # a link this machine cannot give: one line, exit 2, nothing run
  echo "two_host: $*" >&2
  exit 2
}
if ! [[ "$G" =~ ^[1-9][0-9]{0,2}$ ]]; then
  echo "two_host: --ranks-per-node $G: allowed 1..999" >&2
  exit 2
fi
if ! [[ "$H" =~ ^[0-9]{1,2}$ ]] || ((H < 2 || H > 64)); then
  echo "two_host: --hosts $H: allowed 2..64" >&2
  exit 2
fi
number='^([0-9]+([.][0-9]*)?|[.][0-9]+)$'
if [ -n "$gbps" ] && { ! [[ "$gbps" =~ $number ]] || ! awk "BEGIN{exit !($gbps > 0 && $gbps <= 400)}"; }; then
  echo "two_host: --inter-gbps $gbps: allowed a rate in Gb/s, 0 < R <= 400" >&2
  exit 2
fi
if [ -n "$lat_ms" ] && { ! [[ "$lat_ms" =~ $number ]] || ! awk "BEGIN{exit !($lat_ms <= 10000)}"; }; then
  echo "two_host: --inter-latency-ms $lat_ms: allowed 0..10000" >&2
  exit 2
fi
# SB_FAKE_UID: the tests' way to see the refusal a non-root user gets (they run as root).
[ "${SB_FAKE_UID:-$(id -u)}" -eq 0 ] || cannot "needs root (ip netns, veth, mount); run as root"
for tool in ip tc bridge unshare ethtool mpirun python3; do
  command -v "$tool" >/dev/null 2>&1 ||
    cannot "'$tool' not found in PATH; install iproute2 util-linux ethtool python3 openmpi-bin" \
      "(ci/setup.sh)"
done

# Names unique to this run (interface names: at most 15 characters): hosts sb<pid>h<i>, the
# bridge's namespace sb<pid>x; veth ends sv<pid>h<i> (in the host) and sv<pid>p<i> (on the bridge).
id="$$"
hosts=()
for ((i = 0; i < H; i++)); do hosts+=("sb${id}h$i"); done
nsX="sb${id}x" br="sbbr${id}"
subnet_base="10.$((200 + id % 50)).$(((id / 50) % 250))"
subnet="$subnet_base.0/24"
ip_of() { echo "$subnet_base.$(($1 + 1))"; }
work=""

cleanup() {
  local rc=$?
  trap - EXIT INT TERM HUP
  local all=("${hosts[@]}" "$nsX")
  for ns in "${all[@]}"; do
    [ -e "/run/netns/$ns" ] || continue
    local pids
    pids="$(ip netns pids "$ns" 2>/dev/null || true)"
    [ -n "$pids" ] && kill -TERM $pids 2>/dev/null || true
  done
  for _ in 1 2 3 4 5 6 7 8 9 10; do  # up to 1 s for the ranks to go, then SIGKILL
    local left=""
    for ns in "${all[@]}"; do
      [ -e "/run/netns/$ns" ] && left+="$(ip netns pids "$ns" 2>/dev/null || true)"
    done
    [ -z "$left" ] && break
    sleep 0.1
  done
  for ns in "${all[@]}"; do
    if [ -e "/run/netns/$ns" ]; then
      local pids
      pids="$(ip netns pids "$ns" 2>/dev/null || true)"
      [ -n "$pids" ] && kill -KILL $pids 2>/dev/null || true
      # takes its veth ends, their qdiscs and the bridge along
      ip netns del "$ns" 2>/dev/null || true
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

for ns in "$nsX" "${hosts[@]}"; do
  ip netns add "$ns" 2>/dev/null || cannot "'ip netns add' failed (no network-namespace support?)"
done
ip -n "$nsX" link add "$br" type bridge stp_state 0 2>/dev/null ||
  cannot "'ip link add ... type bridge' failed (no bridge driver?)"
for ((i = 0; i < H; i++)); do
  ip link add "sv${id}h$i" netns "${hosts[$i]}" type veth peer name "sv${id}p$i" netns "$nsX" \
    2>/dev/null || cannot "'ip link add ... type veth' failed (no veth driver?)"
done
if ((probe)); then
  echo "two_host: network namespaces, a bridge and veth pairs can be created here"
  exit 0
fi
[ -x "$bin" ] || { echo "two_host: $bin: not an executable; build shardbench first" >&2; exit 2; }

# Quiet, deterministic link: no IPv6 (no DAD/MLD chatter), static neighbours (no ARP), segments
# as the wire would carry them (no TSO) merged on receive (GRO), a plain FIFO queue or tbf.
mac() { ip -n "$1" -o link show "$2" | sed -n 's/.*link\/ether \([0-9a-f:]*\).*/\1/p'; }
quiet_port() {  # ns iface
  ip netns exec "$1" sysctl -qw "net.ipv6.conf.$2.disable_ipv6=1"
  ip netns exec "$1" ethtool -K "$2" tso off gro on >/dev/null 2>&1 ||
    echo "two_host: warning: ethtool -K $2 tso off gro on failed; link counts will be noisier" >&2
}
ip netns exec "$nsX" sysctl -qw "net.ipv6.conf.$br.disable_ipv6=1"
ip -n "$nsX" link set "$br" up
hosts_file="$(ip_of 0) ${hosts[0]}"
for ((i = 1; i < H; i++)); do hosts_file+=$'\n'"$(ip_of "$i") ${hosts[$i]}"; done
for ((i = 0; i < H; i++)); do
  ns="${hosts[$i]}" hif="sv${id}h$i" pif="sv${id}p$i"
  ip -n "$ns" link set lo up
  quiet_port "$ns" "$hif"
  quiet_port "$nsX" "$pif"
  ip -n "$nsX" link set "$pif" master "$br"
  ip -n "$nsX" link set "$pif" up
  ip -n "$ns" addr add "$(ip_of "$i")/24" dev "$hif"
  ip -n "$ns" link set "$hif" up
  mkdir -p "/etc/netns/$ns"  # `ip netns exec` binds this over /etc/hosts for the host's processes
  printf '127.0.0.1 localhost\n%s\n' "$hosts_file" >"/etc/netns/$ns/hosts"
done
macs=()
for ((i = 0; i < H; i++)); do macs+=("$(mac "${hosts[$i]}" "sv${id}h$i")"); done
for ((i = 0; i < H; i++)); do
  for ((j = 0; j < H; j++)); do
    ((i == j)) && continue
    ip -n "${hosts[$i]}" neigh replace "$(ip_of "$j")" lladdr "${macs[$j]}" dev "sv${id}h$i" \
      nud permanent
  done
  # the bridge knows every host from the start: no flooding of the first frames
  ip netns exec "$nsX" bridge fdb replace "${macs[$i]}" dev "sv${id}p$i" master static
done

work="$(mktemp -d /tmp/sb-two-host.XXXXXX)"

# One key of the JSON document on stdin.
json_key() { python3 -c 'import json,sys; print(json.load(sys.stdin)[sys.argv[1]])' "$1"; }

# One timed transfer host i -> host j of N bytes (ci/link_probe.py), starting at CLOCK_MONOTONIC
# START if given: its JSON line.
probe_path() {  # i j bytes [start]
  ip netns exec "${hosts[$2]}" python3 "$here/link_probe.py" serve "$(ip_of "$2")" 5201 &
  local server=$! line
  line="$(ip netns exec "${hosts[$1]}" python3 "$here/link_probe.py" measure "$(ip_of "$2")" \
          5201 "$3" ${4:+"$4"})" || { kill "$server" 2>/dev/null; return 1; }
  wait "$server" || return 1
  echo "$line"
}

# What the unshaped paths move all at once, before any shaping: every host i sends 192 MiB to
# host i+1, all starting at one instant (1 s ahead: the probes' start-up and pings fit in it);
# their bytes over the span from the first start to the last end. Every host's TCP runs on
# this machine's cores, so that is what all links together move (the embedded prediction's
# inter fabric_bytes_per_s). One path alone is not: one stream host 0 -> 1 reached 517-650
# MB/s, while the run's 16 MiB world all-reduce, every boundary at once, moved 481-753 MB/s
# across each of the two hosts' links (docs/network.md).
probe_all_paths() {  # bytes -> all paths' bytes over the span first start -> last end
  local pids=() i failed=0 start
  start="$(python3 -c 'import time; print(time.clock_gettime(time.CLOCK_MONOTONIC) + 1.0)')"
  for ((i = 0; i < H; i++)); do
    probe_path "$i" $(((i + 1) % H)) "$1" "$start" >"$work/unshaped.$i" &
    pids+=($!)
  done
  for i in "${pids[@]}"; do wait "$i" || failed=1; done
  ((failed == 0)) || return 1
  cat "$work"/unshaped.* | python3 -c 'import json, sys
p = [json.loads(l) for l in sys.stdin if l.strip()]
print(sum(x["bytes"] for x in p) / (max(x["end_s"] for x in p) - min(x["start_s"] for x in p)))'
}
# And one stream alone (64 MiB, host 0 -> 1): what one core at each end moves, the CPU a
# link's bytes cost (the prediction's inter stream_bytes_per_s). Both for every run, shaped
# or not (an unshaped run's own probe below times the paths one at a time).
stream="$(probe_path 0 1 $((64 << 20)) | json_key rate_bytes_per_s)" &&
  unshaped="$(probe_all_paths $((192 << 20)))" ||
  refuse "the timed transfer across the hosts' unshaped link failed"

# The shaping: tbf (rate) on both ends of every veth, so a host's egress and its ingress from
# the bridge each run at R; netem (delay) below tbf on the host end only, so a path host->host
# is delayed once each way. Unshaped: pfifo, as the unshaped mode always had.
qdisc="pfifo" burst=0
if [ -n "$gbps" ]; then
  qdisc="tbf"
  kbit="$(awk "BEGIN{printf \"%d\", $gbps * 1e6}")"
  # burst: 2 ms at the rate, at least 64 KiB (a GSO packet); queue: 100 ms at the rate
  burst="$(awk "BEGIN{b = $gbps * 1e9 / 8 * 0.002; printf \"%d\", b < 65536 ? 65536 : b}")"
  for ((i = 0; i < H; i++)); do
    for end in "${hosts[$i]} sv${id}h$i" "$nsX sv${id}p$i"; do
      set -- $end
      if ! err="$(ip netns exec "$1" tc qdisc replace dev "$2" root handle 1: tbf \
                  rate "${kbit}kbit" burst "$burst" latency 100ms 2>&1)"; then
        refuse "--inter-gbps $gbps: tc cannot install tbf (${err//$'\n'/ }); this kernel" \
          "lacks sch_tbf or tc is broken: the rate cannot be shaped here"
      fi
    done
  done
  set --
fi
if [ -n "$lat_ms" ]; then
  [ -n "$gbps" ] && qdisc+="+netem" || qdisc="netem"
  for ((i = 0; i < H; i++)); do
    parent=(root)
    [ -n "$gbps" ] && parent=(parent 1:1)
    if ! err="$(ip netns exec "${hosts[$i]}" tc qdisc replace dev "sv${id}h$i" "${parent[@]}" \
                handle 10: netem delay "${lat_ms}ms" limit 100000 2>&1)"; then
      refuse "--inter-latency-ms $lat_ms: this kernel has no sch_netem (tc: ${err//$'\n'/ });" \
        "delay cannot be emulated here: drop --inter-latency-ms"
    fi
  done
fi
if [ -z "$gbps$lat_ms" ]; then
  for ((i = 0; i < H; i++)); do
    ip netns exec "${hosts[$i]}" tc qdisc replace dev "sv${id}h$i" root pfifo
    ip netns exec "$nsX" tc qdisc replace dev "sv${id}p$i" root pfifo
  done
fi

# The timed transfer: host i -> host i+1 (each host sends once, receives once; with two hosts
# both directions), ~0.75 s of the requested rate (4..64 MiB; 64 MiB unshaped), one at a time.
probe_bytes=$((64 << 20))
[ -n "$gbps" ] && probe_bytes="$(awk "BEGIN{b = $gbps * 1e9 / 8 * 0.75; m = 4 * 2^20;
  M = 64 * 2^20; printf \"%d\", b < m ? m : (b > M ? M : b)}")"
measure_paths() {
  : >"$work/paths"
  for ((i = 0; i < H; i++)); do
    local j=$(((i + 1) % H)) line
    line="$(probe_path "$i" "$j" "$probe_bytes")" || return 1
    echo "$i $j $line" >>"$work/paths"
  done
  python3 "$here/link_probe.py" topology "$H" "$G" "${gbps:--}" "${lat_ms:--}" "$burst" \
    "$qdisc" "$unshaped" "$stream" <"$work/paths" >"$work/network.json"
}
measure_paths || refuse "the timed transfer across the hosts' link failed"
if [ -n "$gbps" ]; then
  # Up to three transfers, the nearest the rate kept: a dip is the shared CPUs' (the sender
  # descheduled), not the link's; refused when no transfer gets within the tolerance.
  tol="${SB_INTER_RATE_TOLERANCE:-0.10}"
  ratio() { json_key rate_to_requested <"$1"; }
  within() { awk "BEGIN{exit !($1 >= 1 - $tol && $1 <= 1 + $tol)}"; }
  r="$(ratio "$work/network.json")"
  for _ in 1 2; do
    within "$r" && break
    cp "$work/network.json" "$work/best.json"
    measure_paths || refuse "the timed transfer across the hosts' link failed"
    r2="$(ratio "$work/network.json")"
    # keep the one nearer the rate asked
    if awk "BEGIN{d = $r2 - 1; e = $r - 1; exit !(d * d > e * e)}"; then
      cp "$work/best.json" "$work/network.json"
    else
      r="$r2"
    fi
  done
  within "$r" ||
    refuse "--inter-gbps $gbps: the shaped link reaches $(awk "BEGIN{printf \"%.3f\", $r * $gbps}")" \
      "Gb/s in frames ($(awk "BEGIN{printf \"%.0f\", 100 * $r}") % of the rate, tolerance" \
      "$(awk "BEGIN{printf \"%.0f\", 100 * $tol}") %, best of 3 transfers): this machine cannot" \
      "honour it"
fi
echo "two_host: link $(python3 -c 'import json,sys; d=json.load(open(sys.argv[1]))
print("%.3f Gb/s, rtt %.0f us" % (d["achieved_gbps"], 1e6 * d["rtt_s"]))' "$work/network.json")" \
  "measured (${qdisc}${gbps:+ ${gbps} Gb/s}${lat_ms:+ ${lat_ms} ms})" >&2

# Every process of a host runs under its own hostname and a private /dev/shm: with a shared
# hostname, vader's segment names of the hosts collide (NETNS.md).
cat >"$work/enter_host.sh" <<EOF
#!/bin/sh
# enter_host.sh <ns> <command...>: runs the command as a process of host <ns>.
ns="\$1"; shift
case "\$ns" in
  sb${id}h[0-9]*) iface="sv${id}h\${ns#sb${id}h}" ;;
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

host_list="${hosts[0]}:$G"
for ((i = 1; i < H; i++)); do host_list+=",${hosts[$i]}:$G"; done
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
# The TCP BTL's default flags (`ompi_info --param btl tcp --level 9`: btl_tcp_flags
# send,put,inplace,need-ack,need-csum,hetero-rdma) include "put": a message over its 128 KiB
# pipeline length (btl_tcp_rdma_pipeline_send_length) goes as one fragment as large as the
# message. When two ranks exchange such messages both ways on their one socket (a pairwise
# Sendrecv: MiCS's replica all-reduce, any 2-rank ring), a message larger than the socket
# buffer (tcp_wmem's 4 MiB) makes the two directions take turns: 16 MB/s each way on a
# 25 MB/s link, against 23.7 MB/s without "put", where the message goes as 128 KiB send
# fragments (2 hosts x 1 rank, 1-16 MiB Sendrecv, 0.2 Gb/s; docs/network.md). Every
# strategy's large messages take the send path, as NCCL's chunked protocols do.
tcp_flags="send,inplace,need-ack,need-csum"
mpirun_args=(mpirun -np $((H * G)) --host "$host_list" --map-by slot --bind-to none
             --oversubscribe
             --mca plm_rsh_agent "$work/rsh_agent.sh"
             --mca pml ob1 --mca btl self,vader,tcp
             --mca btl_tcp_if_include "$subnet" --mca oob_tcp_if_include "$subnet"
             --mca btl_tcp_flags "$tcp_flags"
             --mca mpi_yield_when_idle 1
             -x OPENBLAS_NUM_THREADS=1 -x "SB_HOSTS_NETWORK=$work/network.json"
             "$bin" run --ranks-per-node "$G" "${args[@]}")
echo "two_host: $H hosts ${hosts[*]} on $subnet (bridge $br in $nsX), $G rank(s) each" >&2
# Not exec: the EXIT trap must run after the job.
set +e
"$work/enter_host.sh" "${hosts[0]}" "${mpirun_args[@]}" &
job=$!
wait "$job"
rc=$?
set -e
exit "$rc"
