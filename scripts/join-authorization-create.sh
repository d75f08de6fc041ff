#!/bin/sh
# As a run's join authority (the grantor), authorize a grantee to join its runs:
# creates the authorization and activates it (one transaction, both instructions).
#
#   sh scripts/join-authorization-create.sh CLUSTER GRANTOR_KEYPAIR [GRANTEE_PUBKEY]
#
# CLUSTER          devnet, mainnet-beta, testnet, localnet, or an http(s) RPC URL.
# GRANTOR_KEYPAIR  solana-keygen JSON file of the join authority; it signs and pays.
# GRANTEE_PUBKEY   who may join (and name delegates); omitted or `everyone`: anyone may join
#                  (a permissionless authorization, grantee 11111111111111111111111111111111).
#
# The client is $PSYCHE_SOLANA_CLIENT, else the repository's .venv/bin/psyche-solana-client, else
# psyche-solana-client on PATH. POSIX sh (runs under dash).
set -eu

usage() {
  echo "usage: sh $0 CLUSTER GRANTOR_KEYPAIR [GRANTEE_PUBKEY|everyone]" >&2
  exit 2
}
[ $# -ge 2 ] && [ $# -le 3 ] || usage
cluster=$1
grantor=$2
grantee=${3:-everyone}
[ -r "$grantor" ] || { echo "$0: cannot read the grantor keypair file: $grantor" >&2; exit 2; }

here=$(CDPATH= cd -- "$(dirname -- "$0")" && pwd -P)
. "$here/find-solana-client.sh"

# Only the arguments decide the cluster, the signer and the grantee: a joiner's environment
# (fallback endpoints, its own key, its AUTHORIZER) must not leak into this transaction.
unset WS_RPC RPC_2 WS_RPC_2 RAW_WALLET_PRIVATE_KEY AUTHORIZER

if [ "$grantee" = everyone ]; then
  exec "$client" join-authorization-create --rpc "$cluster" --wallet-private-key-path "$grantor"
fi
exec "$client" join-authorization-create --rpc "$cluster" --wallet-private-key-path "$grantor" \
  --authorizer "$grantee"
