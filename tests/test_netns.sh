#!/bin/sh
# Two "hosts" on one machine: two network namespaces joined by a veth pair,
# each with its own address and (through a UTS namespace) its own host name.
# Open MPI runs over TCP between them; its launch agent (plm_rsh_agent) enters
# the namespace of the host it is asked to reach. Checks:
#  - 2 ranks on 2 hosts, started by launch/ddprun from a hostfile, export the
#    same weights (cmp, bit for bit) as 2 ranks on one host;
#  - a rank frozen on host B is reported by its neighbour on host A by rank
#    and host name, and the whole job ends within 60 s.
# Needs root (namespaces); otherwise it SKIPs with the reason.
. "${top_builddir:-.}/tests/env.sh"
set -u
if [ -z "$MPIRUN" ]; then echo "SKIP: no mpirun (configure found no MPI)"; exit 77; fi
if [ "$(id -u)" -ne 0 ]; then echo "SKIP: network namespaces need root"; exit 77; fi
for t in ip unshare; do
  command -v $t > /dev/null 2>&1 || { echo "SKIP: $t is not installed (iproute2, util-linux)"; exit 77; }
done
dir=$(mktemp -d)
# Names unique to this run, so concurrent runs do not collide.
id=$$
nsA=ddpA$id nsB=ddpB$id vA=ddva$id vB=ddvb$id
net=10.78.$((id % 250)) ipA=10.78.$((id % 250)).1 ipB=10.78.$((id % 250)).2
cleanup() {
  ip netns del "$nsA" 2> /dev/null
  ip netns del "$nsB" 2> /dev/null
  rm -rf "$dir"
}
trap cleanup EXIT
trap 'exit 1' INT TERM
if ! ip netns add "$nsA" 2> "$dir/err" || ! ip netns add "$nsB" 2>> "$dir/err"; then
  echo "SKIP: cannot create network namespaces here: $(head -1 "$dir/err")"; exit 77
fi
set -e
ip link add "$vA" type veth peer name "$vB"
ip link set "$vA" netns "$nsA"
ip link set "$vB" netns "$nsB"
ip -n "$nsA" addr add "$ipA/24" dev "$vA"
ip -n "$nsB" addr add "$ipB/24" dev "$vB"
for ns in "$nsA" "$nsB"; do ip -n "$ns" link set lo up; done
ip -n "$nsA" link set "$vA" up
ip -n "$nsB" link set "$vB" up
set +e
cat > "$dir/agent" << AGENT
#!/bin/sh
# plm_rsh_agent: agent HOST CMD... runs CMD inside HOST's namespaces.
host=\$1; shift
case "\$host" in
  $ipA | hostA) ns=$nsA name=hostA ;;
  $ipB | hostB) ns=$nsB name=hostB ;;
  *) echo "agent: unknown host \$host" >&2; exit 1 ;;
esac
exec ip netns exec "\$ns" unshare --uts sh -c "hostname \$name; \$*"
exec ip netns exec "\$ns" unshare --uts sh -c "hostname \$name; \$*"
AGENT
chmod +x "$dir/agent"
printf '%s slots=1\n%s slots=1\n' "$ipA" "$ipB" > "$dir/hosts"
fail=0
MODEL="--threads 1 --peak-gflops 10 --n-layer 2 --n-head 2 --n-embd 32 --seq-len 64 \
--tokens-per-batch 512 --steps 6 --log-every 3 --eval-every 0 --eval-tokens 64"
# Over TCP on the veth pair only; mpirun itself runs on host A.
NET="--mca plm_rsh_agent $dir/agent --mca btl tcp,self --mca btl_tcp_if_include $net.0/24 \
--mca oob_tcp_if_include $net.0/24"
on_a() { # on_a CMD...: run inside host A's namespaces, named hostA
  timeout -s KILL 240 ip netns exec "$nsA" unshare --uts sh -c 'hostname hostA; exec "$@"' sh "$@"
}
two_hosts() { # two_hosts ARGS...: ddprun, 1 rank per host
  on_a "$top_srcdir/launch/ddprun" --mpirun "$MPIRUN" --hostfile "$dir/hosts" --per-node 1 \
    --program "$DDPTRAIN" $(for a in $NET; do printf -- '--mpi-arg %s ' "$a"; done) -- "$@"
}

timeout 240 "$MPIRUN" -np 2 "$DDPTRAIN" $MODEL --export "$dir/one.st" > "$dir/one.log" 2>&1 ||
  { echo "FAIL: 2 ranks on one host"; sed 's/^/  | /' "$dir/one.log"; fail=1; }
if two_hosts $MODEL --export "$dir/two.st" > "$dir/two.log" 2>&1; then
  if cmp -s "$dir/one.st" "$dir/two.st"; then
    echo "ok: 2 ranks on 2 hosts export the same weights as 2 ranks on one (cmp)"
  else
    echo "FAIL: 2 ranks on 2 hosts export other weights than on one host"; fail=1
  fi
  grep -q "^ddprun: .*--hostfile" "$dir/two.log" || { echo "FAIL: ddprun did not print its mpirun line"; fail=1; }
else
  echo "FAIL: 2 ranks on 2 hosts did not train"; sed 's/^/  | /' "$dir/two.log"; fail=1
fi

# Freeze rank 1 (on host B); rank 0 on host A must name it and end the job.
t0=$(date +%s)
DDPTRAIN_FAULT_RANK=1 DDPTRAIN_FAULT_KIND=STOP DDPTRAIN_FAULT_STEP=3 \
  two_hosts $MODEL --steps 1000000 --heartbeat-timeout 10 > "$dir/freeze.log" 2>&1
rc=$?
dt=$(($(date +%s) - t0))
if [ $rc -ne 0 ] && [ $dt -le 60 ] &&
  grep -q "rank 1 on hostB has not been heard from" "$dir/freeze.log"; then
  echo "ok: a frozen rank on hostB is named from hostA; the job ended ($rc) in $dt s"
else
  echo "FAIL: frozen rank on hostB: status $rc after $dt s"; sed 's/^/  | /' "$dir/freeze.log"; fail=1
fi
sleep 1
if ip netns pids "$nsB" | xargs -r ps -o pid=,stat= -p | awk '$2 !~ /^Z/' | grep -q .; then
  echo "FAIL: processes remain in host B's namespace"; fail=1
  ip netns pids "$nsB" | xargs -r kill -KILL
fi
exit $fail
