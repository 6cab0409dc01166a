#!/usr/bin/env bash
# netns.sh: pretend hosts for multi-node tests, as network namespaces on one bridge.
#
# usage: scripts/netns.sh up NAME NHOSTS
#        scripts/netns.sh down NAME
#
# `up` creates NHOSTS (1..253) host namespaces NAME-h0 .. NAME-h<NHOSTS-1>
# and one switch namespace NAME-sw holding a Linux bridge br0 (no STP, no
# forwarding delay). Host i gets a veth pair: eth0 inside NAME-h<i>, with
# address 10.233.0.<i+1>/24 (one subnet, 10.233.0.0/24), and port h<i> on
# br0 inside NAME-sw. lo is up in every namespace. MTU is the default.
# Run a command on host i with:  ip netns exec NAME-h<i> COMMAND...
#
# `down` deletes every namespace named NAME-sw or NAME-h<digits>, which
# destroys their interfaces with them. It is idempotent: nothing to delete is
# not an error.
#
# Everything is created inside namespaces this script makes: the root
# namespace's interfaces, addresses and routes are never touched (each veth
# pair is created inside NAME-sw with its peer placed straight into the host
# namespace). If `up` fails half-way it removes what it made.
#
# Needs root (CAP_SYS_ADMIN and CAP_NET_ADMIN) and iproute2's `ip`. CI runs
# as root, but a fresh machine may lack iproute2: the CI script (.ci/run)
# installs it with `apt-get install -y iproute2`; do the same by hand.
#
# NAME: 1 to 32 characters from [A-Za-z0-9_-]. Bounded time: the only wait is
# for the links to come up, at most 3 seconds. Prints each command it runs.
# Exit status: 0 on success, 1 on failure, 2 on a usage error.

set -u

SUBNET_PREFIX=10.233.0
BRIDGE=br0

usage() {
    echo "usage: $0 up NAME NHOSTS | down NAME" >&2
    exit 2
}

die() {
    echo "netns.sh: error: $*" >&2
    exit 1
}

# Prints a command, then runs it; on failure says which command failed.
run() {
    echo "+ $*"
    "$@" || {
        echo "netns.sh: command failed: $*" >&2
        return 1
    }
}

check_environment() {
    command -v ip >/dev/null 2>&1 ||
        die "'ip' (iproute2) is not installed: apt-get install -y iproute2"
    [ "$(id -u)" = 0 ] || die "must run as root (network namespaces need CAP_SYS_ADMIN and CAP_NET_ADMIN)"
}

check_name() {
    case "$1" in
        '' | *[!A-Za-z0-9_-]*) die "NAME must be 1 to 32 characters from [A-Za-z0-9_-], got '$1'" ;;
    esac
    [ "${#1}" -le 32 ] || die "NAME must be at most 32 characters, got '$1'"
}

# The namespaces that belong to NAME, one per line.
namespaces_of() {
    ip netns list 2>/dev/null | awk '{print $1}' | grep -E "^$1-(sw|h[0-9]+)\$" || true
}

down() {
    local name=$1 ns
    for ns in $(namespaces_of "$name"); do
        run ip netns delete "$ns" || return 1
    done
    echo "netns.sh: $name is down"
}

# Waits (at most 3 s) until eth0 of every host namespace is up.
wait_links() {
    local name=$1 nhosts=$2 i tries state
    for ((i = 0; i < nhosts; i++)); do
        for ((tries = 0; tries < 30; tries++)); do
            state=$(ip -n "$name-h$i" -o link show eth0 2>/dev/null)
            case "$state" in *LOWER_UP*) break ;; esac
            sleep 0.1
        done
        case "$state" in
            *LOWER_UP*) ;;
            *) echo "netns.sh: eth0 of $name-h$i did not come up within 3 s" >&2; return 1 ;;
        esac
    done
}

up_steps() {
    local name=$1 nhosts=$2 sw="$1-sw" i host
    run ip netns add "$sw" || return 1
    run ip -n "$sw" link set lo up || return 1
    run ip -n "$sw" link add "$BRIDGE" type bridge stp_state 0 forward_delay 0 || return 1
    run ip -n "$sw" link set "$BRIDGE" up || return 1
    for ((i = 0; i < nhosts; i++)); do
        host="$name-h$i"
        run ip netns add "$host" || return 1
        run ip -n "$host" link set lo up || return 1
        run ip -n "$sw" link add "h$i" type veth peer name eth0 netns "$host" || return 1
        run ip -n "$sw" link set "h$i" master "$BRIDGE" || return 1
        run ip -n "$sw" link set "h$i" up || return 1
        run ip -n "$host" addr add "$SUBNET_PREFIX.$((i + 1))/24" dev eth0 || return 1
        run ip -n "$host" link set eth0 up || return 1
    done
    wait_links "$name" "$nhosts"
}

up() {
    local name=$1 nhosts=$2
    case "$nhosts" in
        '' | *[!0-9]*) die "NHOSTS must be a number from 1 to 253, got '$nhosts'" ;;
    esac
    { [ "$nhosts" -ge 1 ] && [ "$nhosts" -le 253 ]; } ||
        die "NHOSTS must be a number from 1 to 253, got '$nhosts'"
    if [ -n "$(namespaces_of "$name")" ]; then
        die "namespaces of '$name' already exist ($(namespaces_of "$name" | tr '\n' ' ')); run: $0 down $name"
    fi
    if ! up_steps "$name" "$nhosts"; then
        echo "netns.sh: setting up '$name' failed; removing what was made" >&2
        down "$name" >&2
        exit 1
    fi
    echo "netns.sh: $name is up: $nhosts hosts $name-h0..$name-h$((nhosts - 1)) at $SUBNET_PREFIX.1..$SUBNET_PREFIX.$nhosts on bridge $BRIDGE in $name-sw"
}

[ $# -ge 1 ] || usage
case "$1" in
    up)
        [ $# -eq 3 ] || usage
        check_name "$2"
        check_environment
        up "$2" "$3"
        ;;
    down)
        [ $# -eq 2 ] || usage
        check_name "$2"
        check_environment
        down "$2" || exit 1
        ;;
    -h | --help) usage ;;
    *) usage ;;
esac
