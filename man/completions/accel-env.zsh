#compdef accel-env

autoload -U is-at-least

_accel-env() {
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
'--config_file=[Config file to report (default\: accelerate'\''s default config path)]:PATH:_files' \
'--config-file=[Config file to report (default\: accelerate'\''s default config path)]:PATH:_files' \
'--json[Print JSON instead of Markdown]' \
'--no-python[Do not run Python to find torch/accelerate/numpy versions]' \
'--no_python[Do not run Python to find torch/accelerate/numpy versions]' \
'-h[Print help (see more with '\''--help'\'')]' \
'--help[Print help (see more with '\''--help'\'')]' \
'-V[Print version]' \
'--version[Print version]' \
'*::command -- Command to exec with the rank contract (after `--`):_cmdambivalent' \
&& ret=0
}

(( $+functions[_accel-env_commands] )) ||
_accel-env_commands() {
    local commands; commands=()
    _describe -t commands 'accel-env commands' commands "$@"
}

if [ "$funcstack[1]" = "_accel-env" ]; then
    _accel-env "$@"
else
    compdef _accel-env accel-env
fi
