#!/bin/sh
# completion/ddptrain.bash: sourced in bash, it registers ddptrain, ddpprep,
# ddpsample and ddprun, and its completion function offers their flags as
# their --help lists them (all of them, for a bare "--"), the values of a
# flag (--precision fp32 bf16 fp16, --model's models, a model flag's listed
# choices, on|off and DIR|auto metavars, DIR flags' directories,
# --flag=value), ddptrain's flags after ddprun's "--", and follows a
# program whose --help changed. SKIPs (77) without bash.
. "${top_builddir:-.}/tests/env.sh"
set -u
command -v bash > /dev/null 2>&1 || { echo "SKIP: bash is not installed"; exit 77; }
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
fail=0
ok() { echo "ok: $*"; }
bad() { echo "FAIL: $*"; fail=1; }
script=$top_srcdir/completion/ddptrain.bash
mkdir -p "$dir/ckpts"
# complete WORDS...: the completions of the last word, one per line, in bash
complete_words() {
  (cd "$dir" && bash -c '. "$1" || exit 1; shift
    COMP_WORDS=("$@"); COMP_CWORD=$(($# - 1)); _ddp_complete || exit 1
    printf "%s\n" "${COMPREPLY[@]}"' complete "$script" "$@")
}
# expect DESCRIPTION "WANTED WORDS" WORDS...: each wanted word is offered
expect() {
  desc=$1 want=$2
  shift 2
  got=$(complete_words "$@" 2> "$dir/err" | sort | tr '\n' ' ')
  for w in $want; do
    case " $got" in *" $w "*) ;; *) bad "$desc: '$w' not offered for '$*'; got: $got $(cat "$dir/err")"; return ;; esac
  done
  ok "$desc: $got"
}
P=$DDPTRAIN
expect "ddptrain --pre" "--precision" "$P" --pre
expect "ddptrain --precision" "fp32 bf16 fp16" "$P" --precision ""
expect "ddptrain --precision=b" "--precision=bf16" "$P" --precision=b
expect "ddptrain --model" "gpt" "$P" --model ""
expect "a model flag's choices" "auto flash matrix" "$P" --attention ""
expect "an on|off metavar" "on off" "$P" --tf32 ""
expect "DIR|auto: directories and auto" "auto ckpts" "$P" --resume ""
expect "ddptrain --conf" "--config" "$P" --conf
expect "ddpprep --val" "--val-frac" "$top_builddir/ddpprep" --val
expect "ddpprep --images" "idx cifar10 cifar100 folder" "$top_builddir/ddpprep" --images ""
expect "ddpprep --channels" "3 1" "$top_builddir/ddpprep" --channels ""
expect "ddprun --dr" "--dry-run" "$top_srcdir/launch/ddprun" --dr
expect "ddpsample --tok" "--tokenizer" "$top_builddir/ddpsample" --tok
expect "ddpsample --tokenizer: directories" "ckpts" "$top_builddir/ddpsample" --tokenizer ""
for p in ddptrain ddpprep ddpsample ddprun; do
  if bash -c '. "$1" && complete -p "$2"' complete "$script" "$p" > /dev/null 2>&1; then
    ok "the script registers $p"
  else
    bad "sourcing the script does not register $p"
  fi
done
expect "ddprun ... -- --pre: ddptrain's flags" "--precision" "$top_srcdir/launch/ddprun" --np 2 --program "$P" -- --pre
# a bare "--": every long flag of --help, nothing else
complete_words "$P" -- | sort > "$dir/offered"
"$P" --help | grep -oE '^ {1,8}(-[A-Za-z], )?--[A-Za-z0-9][A-Za-z0-9-]*' | sed 's/.*--/--/' | sort -u > "$dir/listed"
if [ -s "$dir/listed" ] && cmp -s "$dir/offered" "$dir/listed"; then
  ok "ddptrain --: all $(wc -l < "$dir/listed") flags of --help"
else
  bad "ddptrain --: offered and listed differ:"; diff "$dir/listed" "$dir/offered" | sed 's/^/  | /'
fi
# the flags follow the program: a new --help after a rebuild (a new mtime)
printf '#!/bin/sh\necho "  --alpha N   a"\n' > "$dir/prog" && chmod +x "$dir/prog"
touch -d '2020-01-01' "$dir/prog"
got=$(cd "$dir" && bash -c '. "$1" || exit 1
  COMP_WORDS=(./prog --); COMP_CWORD=1; _ddp_complete; printf "%s " "${COMPREPLY[@]}"
  printf "#!/bin/sh\necho \"  --beta N   b\"\n" > prog; touch -d 2021-01-01 prog
  _ddp_complete; printf "| %s" "${COMPREPLY[@]}"' complete "$script")
if [ "$got" = "--alpha | --beta" ]; then
  ok "the cached flags follow a rebuilt program: $got"
else
  bad "after a rebuild: '$got', want '--alpha | --beta'"
fi
exit $fail
