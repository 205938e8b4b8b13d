#!/bin/sh
# Makes the compose demo's gateway keys at its first start: one key per
# tenant in DIR/<tenant>.key (the load generator reads them; so can you:
# docker compose exec load cat /keys/acme.key) and the gateway's tenants file
# DIR/tenants.yaml with their SHA-256 hashes. No key is written in the
# repository, so no two installations share one. The keys volume keeps them
# across restarts; `docker compose down -v` forgets them.
#
#   sh keys.sh DIR
#
# It needs a POSIX shell, head, base64, tr, sha256sum and cut (BusyBox has
# them); the gateway's image has no shell, so it runs in the load image.
set -eu
dir=${1:?usage: keys.sh DIR}
if [ -s "$dir/tenants.yaml" ]; then
  echo "keys.sh: keeping the keys in $dir"
  exit 0
fi
umask 022

# newkey TENANT: writes a fresh key (what `goodput keys new` makes: gp- and 32
# random bytes in URL-safe base64) to DIR/TENANT.key and prints its hash.
newkey() {
  key="gp-$(head -c 32 /dev/urandom | base64 | tr '+/' '-_' | tr -d '=\n')"
  printf '%s' "$key" >"$dir/$1.key"
  printf '%s' "$key" | sha256sum | cut -d' ' -f1
}

acme=$(newkey acme)
beta=$(newkey beta)
globex=$(newkey globex)

# The tenants (README: "Tenants, gateway keys and limits"); the classes are
# the slos: of goodput.yaml. beta's concurrency limit is below what the load
# asks for, so its requests queue and some are refused (429).
cat >"$dir/tenants.yaml.new" <<YAML
tenants:
  - name: acme
    slo: interactive
    slo_by_shape: {longgen: batch}
    keys:
      - id: acme-demo
        sha256: "$acme"
    limits: {rpm: 1200, tpm: 600000, max_concurrency: 32}
  - name: beta
    slo: reader
    keys:
      - id: beta-demo
        sha256: "$beta"
    limits: {rpm: 120, tpm: 100000, max_concurrency: 2, burst: 10}
  - name: globex
    slo: batch
    keys:
      - id: globex-demo
        sha256: "$globex"
    limits: {rpm: 60, tpm: 300000, max_concurrency: 4}
YAML
mv "$dir/tenants.yaml.new" "$dir/tenants.yaml"
chmod 0444 "$dir"/*.key "$dir/tenants.yaml"
echo "keys.sh: made a key for acme, beta and globex in $dir"
