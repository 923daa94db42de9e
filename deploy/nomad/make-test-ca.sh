#!/bin/sh
# A CA and the certificates of a *test* cluster's mutual TLS, made with openssl (for
# production, use your PKI, Vault's PKI engine, or `nomad tls ca create` / `nomad tls cert
# create`, which make the same names). Run it once, then copy each file where it is used:
#
#   sh deploy/nomad/make-test-ca.sh ./tls server1.example,192.0.2.11 server2.example,192.0.2.12
#
# Arguments: the output folder, then for each Nomad server a comma-separated list of the
# names and IP addresses its agents and the admin reach it by. It writes (keys 0600):
#
#   nomad-agent-ca.pem, nomad-agent-ca-key.pem   the CA (keep its key off every node)
#   global-server-nomad.pem, -key.pem            Nomad servers: server.global.nomad, localhost,
#                                                127.0.0.1 and every name/address given
#   global-client-nomad.pem, -key.pem            Nomad clients: client.global.nomad, localhost
#   global-cli-nomad.pem, -key.pem               people's nomad CLI (NOMAD_CLIENT_CERT ...)
#   rock-admin.pem, rock-admin-key.pem           rock's admin: plugins.nomad.client_cert/client_key
#
# Nomad checks that a server's certificate names server.<region>.nomad and a client's
# client.<region>.nomad (verify_server_hostname); with verify_https_client every HTTPS caller
# needs a certificate this CA signed. REGION (global) and DAYS (365) change the defaults.
set -eu

OUT=${1:?usage: make-test-ca.sh <folder> [server names and addresses, comma-separated] ...}
shift
REGION=${REGION:-global}
DAYS=${DAYS:-365}
mkdir -p "$OUT"
umask 077
cd "$OUT"

if [ ! -f nomad-agent-ca.pem ]; then
    openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -sha256 -days "$DAYS" \
        -subj "/CN=rock test Nomad CA" -keyout nomad-agent-ca-key.pem -out nomad-agent-ca.pem \
        -addext "basicConstraints=critical,CA:TRUE" -addext "keyUsage=critical,keyCertSign,cRLSign" 2>/dev/null
fi

# issue <file stem> <common name> <extended key usage> <subjectAltName list>
issue() {
    cat > "$1.ext" <<EOF
basicConstraints=CA:FALSE
keyUsage=critical,digitalSignature,keyEncipherment
extendedKeyUsage=$3
subjectAltName=$4
EOF
    openssl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -subj "/CN=$2" \
        -keyout "$1-key.pem" -out "$1.csr" 2>/dev/null
    openssl x509 -req -in "$1.csr" -CA nomad-agent-ca.pem -CAkey nomad-agent-ca-key.pem -CAcreateserial \
        -sha256 -days "$DAYS" -extfile "$1.ext" -out "$1.pem" 2>/dev/null
    rm -f "$1.csr" "$1.ext"
    echo "made $OUT/$1.pem ($2)"
}

sans="DNS:server.$REGION.nomad,DNS:localhost,IP:127.0.0.1"
for server in "$@"; do
    for name in $(echo "$server" | tr ',' ' '); do
        case "$name" in
            *[!0-9.]*) sans="$sans,DNS:$name" ;;
            *) sans="$sans,IP:$name" ;;
        esac
    done
done
issue "$REGION-server-nomad" "server.$REGION.nomad" serverAuth,clientAuth "$sans"
issue "$REGION-client-nomad" "client.$REGION.nomad" serverAuth,clientAuth "DNS:client.$REGION.nomad,DNS:localhost,IP:127.0.0.1"
issue "$REGION-cli-nomad" "cli.$REGION.nomad" clientAuth "DNS:cli.$REGION.nomad,DNS:localhost"
issue rock-admin "rock-admin.$REGION.nomad" clientAuth "DNS:rock-admin.$REGION.nomad"
rm -f nomad-agent-ca.srl
openssl verify -CAfile nomad-agent-ca.pem "$REGION-server-nomad.pem" "$REGION-client-nomad.pem" \
    "$REGION-cli-nomad.pem" rock-admin.pem
