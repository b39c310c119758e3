#compdef accel-estimate-memory

autoload -U is-at-least

_accel-estimate-memory() {
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

(( $+functions[_accel-estimate-memory_commands] )) ||
_accel-estimate-memory_commands() {
    local commands; commands=()
    _describe -t commands 'accel-estimate-memory commands' commands "$@"
}

if [ "$funcstack[1]" = "_accel-estimate-memory" ]; then
    _accel-estimate-memory "$@"
else
    compdef _accel-estimate-memory accel-estimate-memory
fi
