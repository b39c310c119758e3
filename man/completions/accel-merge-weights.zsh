#compdef accel-merge-weights

autoload -U is-at-least

_accel-merge-weights() {
    typeset -A opt_args
    typeset -a _arguments_options
    local ret=1

    if is-at-least 5.2; then
        _arguments_options=(-s -S -C)
    else
        _arguments_options=(-s -C)
    fi

    local context curcontext="$curcontext" state line
    _arguments "${_arguments_options[@]}" : \
'-h[Print help (see more with '\''--help'\'')]' \
'--help[Print help (see more with '\''--help'\'')]' \
'-V[Print version]' \
'--version[Print version]' \
'*::args -- Arguments:_default' \
&& ret=0
}

(( $+functions[_accel-merge-weights_commands] )) ||
_accel-merge-weights_commands() {
    local commands; commands=()
    _describe -t commands 'accel-merge-weights commands' commands "$@"
}

if [ "$funcstack[1]" = "_accel-merge-weights" ]; then
    _accel-merge-weights "$@"
else
    compdef _accel-merge-weights accel-merge-weights
fi
