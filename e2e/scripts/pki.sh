# shellcheck shell=bash
# pki.sh: sourced by controlplane.sh and ocm-grpc-env.sh (so by the interop and bench scripts on
# OCM's and Maestro's gRPC servers). The one way the test scripts make certificates with openssl,
# in the current directory:
#
#   pki_ca DAYS CN                                  ca.crt, ca.key: a CA
#   pki_leaf NAME DAYS SUBJECT USAGE [SANS] [KEY_USAGE]
#                                                   NAME.crt, NAME.key signed by ca.*: USAGE is the
#                                                   extended key usage (serverAuth, clientAuth),
#                                                   SANS e.g. "IP:127.0.0.1,DNS:localhost", KEY_USAGE
#                                                   default digitalSignature
#
# ECDSA P-256 keys: generating RSA-2048 keys costs seconds on a loaded 2-core machine, EC keys
# milliseconds, and every client involved (Go, rustls, kubectl) speaks ECDSA.

PKI_EC=(-newkey ec -pkeyopt ec_paramgen_curve:prime256v1)

pki_ca() {
  openssl req -x509 -new -nodes "${PKI_EC[@]}" -keyout ca.key -out ca.crt -days "$1" -subj "/CN=$2" \
    -addext "basicConstraints=critical,CA:TRUE" -addext "keyUsage=critical,keyCertSign,cRLSign,digitalSignature"
}

pki_leaf() {
  local name=$1 days=$2 subject=$3 usage=$4 sans=${5:-} key_usage=${6:-digitalSignature}
  local ext=("basicConstraints=critical,CA:FALSE" "keyUsage=critical,$key_usage" "extendedKeyUsage=$usage")
  [ -z "$sans" ] || ext+=("subjectAltName=$sans")
  openssl req -new -nodes "${PKI_EC[@]}" -keyout "$name.key" -out "$name.csr" -subj "$subject"
  openssl x509 -req -in "$name.csr" -CA ca.crt -CAkey ca.key -CAcreateserial -days "$days" -out "$name.crt" \
    -extfile <(printf '%s\n' "${ext[@]}")
  rm -f "$name.csr" ca.srl
}
