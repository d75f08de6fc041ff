#!/bin/sh
# As a grantee (a client's authorizer), replace the delegate keys that may join a run in its
# place, under the authorization GRANTOR -> GRANTEE.
#
#   sh scripts/join-authorization-set-delegates.sh CLUSTER GRANTOR_PUBKEY GRANTEE_KEYPAIR \
#       [DELEGATE_KEYPAIR ...]
#
# CLUSTER           devnet, mainnet-beta, testnet, localnet, or an http(s) RPC URL.
# GRANTOR_PUBKEY    the run's join authority, who created the authorization.
# GRANTEE_KEYPAIR   solana-keygen JSON file of the grantee; it signs and pays.
# DELEGATE_KEYPAIR  solana-keygen JSON files; their public keys become the delegates (at most 64).
#                   The current delegates are cleared first; none given: only clears.
#
# The client is $PSYCHE_SOLANA_CLIENT, else the repository's .venv/bin/psyche-solana-client, else
# psyche-solana-client on PATH. POSIX sh (runs under dash).
set -eu

usage() {
  echo "usage: sh $0 CLUSTER GRANTOR_PUBKEY GRANTEE_KEYPAIR [DELEGATE_KEYPAIR ...]" >&2
  exit 2
}
[ $# -ge 3 ] || usage
cluster=$1
grantor=$2
grantee=$3
shift 3
[ -r "$grantee" ] || { echo "$0: cannot read the grantee keypair file: $grantee" >&2; exit 2; }

here=$(CDPATH= cd -- "$(dirname -- "$0")" && pwd -P)
. "$here/find-solana-client.sh"

# Only the arguments decide the cluster, the signer and the delegates (see the create script).
unset WS_RPC RPC_2 WS_RPC_2 RAW_WALLET_PRIVATE_KEY AUTHORIZER DELEGATES_ADDED DELEGATE_KEYPAIRS

# No arrays in POSIX sh: the positional parameters become the client's argument list, each
# delegate file turned into `--delegate-keypair FILE` (files with spaces in their names survive).
for delegate do
  shift
  set -- "$@" --delegate-keypair "$delegate"
done
exec "$client" join-authorization-delegate --rpc "$cluster" --wallet-private-key-path "$grantee" \
  --join-authority "$grantor" --delegates-clear "$@"
