# bash completion for ddptrain, ddpprep, ddpsample and ddprun (and any
# program built on ddp_main: `complete -F _ddp_complete PROGRAM`).
#
# The flags are read from the program's own --help the first time it is
# completed, and kept for the shell session under its path and modification
# time, so they follow the program: a rebuilt ddptrain with a new flag, a
# model's own flags, a program of one's own. Values: the choices --help
# lists as "(a, b, c)" or in a metavar such as on|off, the models under
# --model, a few core flags whose values --help words as prose (below),
# files for FILE/GLOB/PREFIX/PATH and directories for DIR. After `--`,
# ddprun completes the flags of the program it starts.
# Installed as completions/ddptrain, with ddpprep, ddpsample and ddprun
# linked to it, for bash-completion to load on first use; it needs bash 4.2
# or later.

declare -gA _ddp_flags_cache=()

# _ddp_flags PROGRAM: lines "FLAG<TAB>METAVAR<TAB>CHOICES" for each long
# flag of PROGRAM's --help (METAVAR: the word one space after the flag;
# CHOICES space-separated), then "@models<TAB>NAMES" (ddptrain's "Model
# NAME (--model NAME)" sections).
_ddp_flags() {
  local prog=$1 path key stamp
  path=$(type -P -- "$prog" 2> /dev/null) || return 0
  stamp=$(stat -c %Y -- "$path" 2> /dev/null)
  key="$path@$stamp"
  if [[ -z ${_ddp_flags_cache[$key]+set} ]]; then
    local line flag metavar choices models= out= re_opt re_choices re_model
    # option rows start at most 8 columns in; deeper lines continue a row's
    # text and may mention other flags
    re_opt='^ {1,8}(-[A-Za-z], )?(--[A-Za-z0-9][A-Za-z0-9-]*)( ([^ ]+))?'
    re_choices='\(([A-Za-z0-9_.:-]+(, [A-Za-z0-9_.:-]+)+)\)( \[[^]]*\])?$'
    re_model='^Model ([^ ]+) \(--model '
    while IFS= read -r line; do
      if [[ $line =~ $re_model ]]; then
        models+=" ${BASH_REMATCH[1]}"
      elif [[ $line =~ $re_opt ]]; then
        flag=${BASH_REMATCH[2]} metavar=${BASH_REMATCH[4]} choices=
        [[ $line =~ $re_choices ]] && choices=${BASH_REMATCH[1]//,/}
        [[ $out == *$'\n'"$flag"$'\t'* ]] || out+=$'\n'"$flag"$'\t'"$metavar"$'\t'"$choices"
      fi
    done < <("$path" --help 2> /dev/null)
    _ddp_flags_cache[$key]="${out#$'\n'}"$'\n'"@models"$'\t'"${models# }"
  fi
  printf '%s\n' "${_ddp_flags_cache[$key]}"
}

# _ddp_values FLAG METAVAR CHOICES MODELS: the words a value may be
# (files and directories are compgen's).
_ddp_values() {
  local flag=$1 metavar=$2 choices=$3 models=$4 alt words=$3
  # core flags whose values --help gives in prose
  case "$flag" in
    --precision | --grad-reduce-dtype) words="fp32 bf16 fp16" ;;
    --loss-scaling) words="auto dynamic none" ;;
    --optimizer) words="adamw sgd lamb" ;;
    --sampler) words="bucket random" ;;
    --comm-progress) words="auto thread test" ;;
    --device) words="auto cpu cuda" ;;
    --model) words=$models ;;
  esac
  if [[ $metavar == *'|'* ]]; then
    for alt in ${metavar//|/ }; do
      [[ $alt == *[A-Z]* ]] || words+=" $alt"
    done
  fi
  printf '%s\n' "$words"
}

_ddp_complete() {
  local cur=${COMP_WORDS[COMP_CWORD]} prev= prog=${COMP_WORDS[0]} i start=1
  COMPREPLY=()
  # ddprun: after `--`, the flags of the program it starts
  if [[ ${prog##*/} == ddprun ]]; then
    local target=
    for ((i = 1; i < COMP_CWORD; ++i)); do
      if [[ ${COMP_WORDS[i]} == --program ]]; then
        target=${COMP_WORDS[i + 1]}
      elif [[ ${COMP_WORDS[i]} == --program=* ]]; then
        target=${COMP_WORDS[i]#--program=}
      elif [[ ${COMP_WORDS[i]} == -- ]]; then
        if [[ -z $target ]]; then
          local dir
          dir=$(dirname -- "$(type -P -- "$prog" 2> /dev/null || echo "$prog")")
          if [[ -x $dir/ddptrain ]]; then target=$dir/ddptrain
          elif [[ -x $dir/../ddptrain ]]; then target=$dir/../ddptrain
          else target=ddptrain; fi
        fi
        prog=$target start=$((i + 1))
        break
      fi
    done
  fi
  ((COMP_CWORD > start)) && prev=${COMP_WORDS[COMP_CWORD - 1]}
  local table models flag metavar choices
  table=$(_ddp_flags "$prog")
  models=$(sed -n 's/^@models\t//p' <<< "$table")
  # --flag=value: complete the value after the '='
  local lead=
  if [[ $cur == --*=* ]]; then
    prev=${cur%%=*} lead=${cur%%=*}= cur=${cur#*=}
  fi
  if [[ -n $prev && $prev == -* ]]; then
    while IFS=$'\t' read -r flag metavar choices; do
      [[ $flag == "$prev" ]] || continue
      if [[ -n $metavar ]]; then
        case "$metavar" in
          DIR*) compopt -o filenames 2> /dev/null; mapfile -t COMPREPLY < <(compgen -d -- "$cur") ;;
          FILE* | GLOB | PREFIX | PATH*) compopt -o filenames 2> /dev/null; mapfile -t COMPREPLY < <(compgen -f -- "$cur") ;;
        esac
        local words
        words=$(_ddp_values "$flag" "$metavar" "$choices" "$models")
        # shellcheck disable=SC2207
        [[ -n ${words// /} ]] && COMPREPLY+=($(compgen -W "$words" -- "$cur"))
        [[ -n $lead ]] && COMPREPLY=("${COMPREPLY[@]/#/$lead}")
        return 0
      fi
      break
    done <<< "$table"
  fi
  if [[ -z $lead && ( $cur == -* || -z $cur ) ]]; then
    local flags
    flags=$(cut -f1 <<< "$table" | grep '^--')
    [[ ${prog##*/} == ddprun ]] && flags+=$'\n--'
    # shellcheck disable=SC2207
    COMPREPLY=($(compgen -W "$flags" -- "$cur"))
  fi
  return 0
}

complete -F _ddp_complete ddptrain ddpprep ddpsample ddprun
