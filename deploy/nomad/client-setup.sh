#!/bin/sh
# Prepare one Nomad client node for rock's sandboxes (run as root on every client that may run
# them, then restart its Nomad agent with client.hcl's meta). What it does:
#
#  1. makes the Docker network the sandboxes join (plugins.nomad.sandbox_network,
#     "rock-sandboxes"): a bridge with inter-container traffic disabled (enable_icc=false), so
#     no sandbox can open a connection to another on the node. Its Linux bridge is named
#     $BRIDGE so that the rules below can name it;
#  2. adds packet-filter rules (iptables) that keep sandboxes away from the node and its LAN:
#     - nothing from the sandboxes' bridge to the node itself (its Nomad agent on 4646/4647,
#       its SSH, the other sandboxes' published rocklets on the node's own address), except
#       answers to connections the node made (the published rocklet port's replies) and DNS
#       when the node's resolver is local;
#     - nothing from the sandboxes to private and link-local addresses (the cluster's LAN,
#       other nodes, the admin, a cloud's metadata service at 169.254.169.254); the internet
#       stays reachable through Docker's masquerading;
#     - when ADMIN_CIDR is set, new connections to a sandbox's rocklet (container port 22555,
#       the only port rock publishes) only from the admin's addresses: the rocklet checks the
#       sandbox's secret, which travels in plain HTTP (see README.md, "TLS and what travels
#       in clear"), so only the admin should be able to send it there.
#
# The rules are not persisted: run this script at boot (a systemd unit ordered after
# docker.service), or save them with your distribution's tool (netfilter-persistent save).
# Docker keeps the network across restarts.
#
#   ADMIN_CIDR=192.0.2.5/32 sh deploy/nomad/client-setup.sh
#
# Settings (environment): NETWORK (rock-sandboxes), BRIDGE (rock-sbx0), SUBNET (a free /16
# by default, chosen by Docker), ADMIN_CIDR (unset: any address may reach the rocklets),
# BLOCKED (the ranges sandboxes may not reach; default: every non-global range but
# loopback, derived with python3), RESOLVERS (DNS servers they may ask
# there; default: the node's own, from resolv.conf), LOCAL_DNS (1: let sandboxes ask a
# resolver on the node itself).
set -eu

NETWORK=${NETWORK:-rock-sandboxes}
BRIDGE=${BRIDGE:-rock-sbx0}
SUBNET=${SUBNET:-}
ADMIN_CIDR=${ADMIN_CIDR:-}
# By default every range the standard library does not call global (private, shared, link-local,
# reserved), loopback left out, derived from Python's own tables so the list follows them.
if [ -z "${BLOCKED:-}" ]; then
    if ! command -v python3 >/dev/null 2>&1; then
        echo "client-setup.sh: BLOCKED is not set and python3, which derives it, is missing:" \
            "set BLOCKED to the CIDR ranges sandboxes may not reach, space-separated" >&2
        exit 2
    fi
    BLOCKED=$(python3 -c '
import ipaddress
slices = (ipaddress.IPv4Network((i << 16, 16)) for i in range(1 << 16))
kept = [n for n in slices if not n.is_global and not n.is_loopback]
print(" ".join(str(n) for n in ipaddress.collapse_addresses(kept)))')
fi
LOCAL_DNS=${LOCAL_DNS:-0}
# The node's resolvers outside loopback (systemd-resolved's upstreams when it is in use).
RESOLVERS=${RESOLVERS:-$(cat /run/systemd/resolve/resolv.conf /etc/resolv.conf 2>/dev/null \
    | awk '$1 == "nameserver" && $2 !~ /^127\./ && $2 !~ /:/ {print $2}' | sort -u)}

if ! docker network inspect "$NETWORK" >/dev/null 2>&1; then
    docker network create --driver bridge \
        ${SUBNET:+--subnet "$SUBNET"} \
        --opt com.docker.network.bridge.enable_icc=false \
        --opt com.docker.network.bridge.name="$BRIDGE" \
        --label rock.network=isolated \
        "$NETWORK"
fi
icc=$(docker network inspect -f '{{index .Options "com.docker.network.bridge.enable_icc"}}' "$NETWORK")
if [ "$icc" != "false" ]; then
    echo "network $NETWORK exists with inter-container traffic allowed (enable_icc=$icc);" \
         "remove it (docker network rm $NETWORK) and run this script again" >&2
    exit 1
fi
BRIDGE=$(docker network inspect -f '{{index .Options "com.docker.network.bridge.name"}}' "$NETWORK")
SUBNET=$(docker network inspect -f '{{range .IPAM.Config}}{{.Subnet}}{{end}}' "$NETWORK")

# Add a rule once (iptables -C checks whether it is there).
rule() {
    chain=$1
    shift
    iptables -C "$chain" "$@" 2>/dev/null || iptables -I "$chain" "$@"
}

# To the node itself. -I puts each rule first: the accepts are added last so they come first.
rule INPUT -i "$BRIDGE" -j DROP
if [ "$LOCAL_DNS" = 1 ]; then
    rule INPUT -i "$BRIDGE" -p udp --dport 53 -j ACCEPT
    rule INPUT -i "$BRIDGE" -p tcp --dport 53 -j ACCEPT
fi
rule INPUT -i "$BRIDGE" -m conntrack --ctstate ESTABLISHED,RELATED -j ACCEPT

# Through the node (DOCKER-USER is the chain Docker leaves to its operators). Docker's DNS
# server for the network asks the node's resolvers from the sandbox's side: let those through.
for range in $BLOCKED; do
    rule DOCKER-USER -i "$BRIDGE" -d "$range" -j DROP
done
for resolver in $RESOLVERS; do
    rule DOCKER-USER -i "$BRIDGE" -d "$resolver" -p udp --dport 53 -j RETURN
    rule DOCKER-USER -i "$BRIDGE" -d "$resolver" -p tcp --dport 53 -j RETURN
done
if [ -n "$ADMIN_CIDR" ]; then
    rule DOCKER-USER -o "$BRIDGE" -p tcp --dport 22555 -m conntrack --ctstate NEW ! -s "$ADMIN_CIDR" -j DROP
fi
rule DOCKER-USER -i "$BRIDGE" -m conntrack --ctstate ESTABLISHED,RELATED -j RETURN

echo "network $NETWORK ready: bridge $BRIDGE, subnet $SUBNET, no traffic between its containers"
echo "now set this node's meta (client.hcl) and restart its Nomad agent:"
echo "  client { meta { rock_sandbox_network = \"$NETWORK\" } }"
