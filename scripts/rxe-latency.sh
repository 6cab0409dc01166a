# Sourced by scripts/verbs-ab.sh and scripts/verbs-protocol.sh (inside the
# Soft-RoCE guest): the two 8 B latencies they put side by side.
RXE_IP=192.168.77.1
GID=${GID:-1}

# perftest's ib_write_lat -s 8 over rxe0, server and client in this guest:
# prints "typical X us".
perftest() {
  ib_write_lat -d rxe0 -x "$GID" -s 8 -n 3000 -F >/tmp/srv.out 2>&1 &
  sleep 1
  ib_write_lat -d rxe0 -x "$GID" -s 8 -n 3000 -F "$RXE_IP" 2>&1 |
    awk '/^ *8 /{print "typical " $5 " us"}'
  wait
}

# streamcomm-bench BENCH's 8 B host calls over verbs, two ranks: prints
# "p50 X us, p99 Y us" one way.
host_calls() {
  STREAMCOMM_TRANSPORT=verbs "$1" sendrecv -b 8 -e 8 -n 2 -w 1 --ranks 2 \
    --latency-iters "${LAT_ITERS:-3000}" 2>&1 |
    sed -nE 's/.*host calls.*p50 ([0-9.]+) us.*p99 ([0-9.]+) us.*/p50 \1 us, p99 \2 us/p'
}
