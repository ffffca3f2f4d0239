#!/usr/bin/env bash
# A local certificate authority and a certificate for localhost, 127.0.0.1 and ::1 signed by it, with openssl:
#   bash scripts/local_cert.sh DIR   ->  DIR/ca.pem (what clients trust), DIR/localhost.pem, DIR/localhost-key.pem
# Serve with S2S_TLS_CERT=DIR/localhost.pem S2S_TLS_KEY=DIR/localhost-key.pem. Files already there are kept.
# `make tls-cert` runs it for certs/; the tests run it for a folder of their own.
set -euo pipefail
dir=${1:?usage: local_cert.sh DIR}
mkdir -p "$dir"
cd "$dir"
[ -s localhost.pem ] && [ -s localhost-key.pem ] && [ -s ca.pem ] && exit 0
umask 077
curve=(-newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes)
openssl req -x509 "${curve[@]}" -days 3650 -subj "/CN=s2s local CA" \
	-addext "keyUsage=critical,keyCertSign,cRLSign" -keyout ca-key.pem -out ca.pem
openssl req -x509 "${curve[@]}" -days 825 -subj "/CN=localhost" -CA ca.pem -CAkey ca-key.pem \
	-addext "subjectAltName=DNS:localhost,IP:127.0.0.1,IP:0:0:0:0:0:0:0:1" \
	-addext "basicConstraints=critical,CA:FALSE" -addext "extendedKeyUsage=serverAuth" \
	-keyout localhost-key.pem -out localhost.pem
chmod 644 ca.pem localhost.pem
echo "made $(pwd)/localhost.pem (and its key) signed by $(pwd)/ca.pem"
