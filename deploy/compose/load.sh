#!/bin/sh
# Traffic for the compose demo: a few clients per tenant, each sending one
# request after another to the gateway with the tenant's key, with prompts
# and answers of varied length, so that every dashboard has something to
# show: attainment and misses (long prompts make a TTFT above interactive's
# 500 ms; beta's queueing misses its deadline), goodput, ISL/OSL shapes
# (chat, rag, longgen), queueing and 429s (beta asks for more than its
# max_concurrency of 2), engine errors (1 request in 100 asks the simulator
# for a fault). It prints a line a minute per tenant.
#
#   sh load.sh            # in the load service; GATEWAY, KEYS, MODEL may be set
#
# It needs a POSIX shell, curl and the usual tools (od, tr, sort, uniq, awk,
# mktemp): the curl image has them (BusyBox). There is no load generator in
# the gateway's image, which has no shell.
set -u
gw=${GATEWAY:-http://gateway:8080}
keys=${KEYS:-/keys}
model=${MODEL:-sim-llama}
work=$(mktemp -d)

# rand N: a number from 0 to N-1.
rand() {
  r=$(od -An -N2 -tu2 /dev/urandom | tr -d ' \n')
  echo $((r % $1))
}

# prompt N: prints a prompt of N words, N a multiple of 10 (the simulator
# counts a word as a prompt token).
prompt() {
  i=0
  while [ "$i" -lt "$1" ]; do
    printf 'lorem ipsum dolor sit amet consectetur adipiscing elit sed do '
    i=$((i + 10))
  done
}

# request TENANT ISL OSL STREAM: one request; 1 in 10 on /v1/completions,
# 1 in 100 with a simulator fault. Prints the status (000: no response).
request() {
  route=chat/completions
  fault=""
  [ "$(rand 10)" -eq 0 ] && route=completions
  case $(rand 100) in
  0) fault="status=503" ;;
  1) fault="reset-after=$(rand 20)" ;;
  esac
  {
    if [ "$route" = completions ]; then
      printf '{"model":"%s","stream":%s,"max_tokens":%d,"prompt":"' "$model" "$4" "$3"
      prompt "$2"
      printf '"}'
    else
      printf '{"model":"%s","stream":%s,"max_tokens":%d,"messages":[{"role":"user","content":"' "$model" "$4" "$3"
      prompt "$2"
      printf '"}]}'
    fi
  } | curl -sS -o /dev/null -w '%{http_code}' --max-time 300 \
    -H "@$work/$1.auth" -H 'Content-Type: application/json' \
    ${fault:+-H "X-Sim-Fault: $fault"} \
    --data-binary @- "$gw/v1/$route" 2>/dev/null || true
}

# client TENANT: sends requests for TENANT forever, with the tenant's mix
# of lengths and pauses, and appends each status to $work/TENANT.status.
client() {
  while :; do
    stream=true
    case $1 in
    acme) # chat, 1 in 8 a rag prompt, 1 in 40 a long generation
      case $(rand 40) in
      0) isl=$((64 + $(rand 256))) osl=$((1024 + $(rand 200))) ;;
      [1-5]) isl=$((1800 + $(rand 1600))) osl=$((32 + $(rand 160))) ;;
      *) isl=$((32 + $(rand 800))) osl=$((16 + $(rand 240))) ;;
      esac
      pause=$(rand 10) ;;
    beta) # short chat, in bursts
      isl=$((16 + $(rand 300))) osl=$((8 + $(rand 120)))
      pause=$(rand 3) ;;
    globex) # batch jobs: long answers, half of them not streamed
      isl=$((200 + $(rand 1800))) osl=$((300 + $(rand 500)))
      [ "$(rand 2)" -eq 0 ] && stream=false
      pause=$(rand 20) ;;
    esac
    isl=$(((isl + 9) / 10 * 10))
    echo "$(request "$1" "$isl" "$osl" "$stream")" >>"$work/$1.status"
    sleep "$((pause / 10)).$((pause % 10))"
  done
}

# report: a line a minute per tenant with the statuses of its requests.
report() {
  while :; do
    sleep 60
    for t in acme beta globex; do
      [ -s "$work/$t.status" ] || continue
      mv "$work/$t.status" "$work/$t.seen"
      echo "load: $t: $(wc -l <"$work/$t.seen" | tr -d ' ') requests in the last minute, statuses:$(sort "$work/$t.seen" | uniq -c | awk 'NF == 2 { printf " %s×%s", $2, $1 }')"
    done
  done
}

for t in acme beta globex; do
  if [ ! -s "$keys/$t.key" ]; then
    echo "load: no key for $t in $keys (the keys service makes them)" >&2
    exit 1
  fi
  # The key goes in a header file, not on curl's command line (ps shows it).
  printf 'Authorization: Bearer %s\n' "$(cat "$keys/$t.key")" >"$work/$t.auth"
done

trap 'kill $(jobs -p) 2>/dev/null; exit 0' INT TERM
echo "load: sending to $gw: 6 clients for acme, 3 for beta (max_concurrency 2), 2 for globex"
for _ in 1 2 3 4 5 6; do client acme & done
for _ in 1 2 3; do client beta & done
for _ in 1 2; do client globex & done
report &
wait
