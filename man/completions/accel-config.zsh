#compdef accel-config

autoload -U is-at-least

_accel-config() {
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
'--config_file=[Config file to read or write (default\: accelerate'\''s default config path)]:PATH:_files' \
'--config-file=[Config file to read or write (default\: accelerate'\''s default config path)]:PATH:_files' \
'-h[Print help (see more with '\''--help'\'')]' \
'--help[Print help (see more with '\''--help'\'')]' \
'-V[Print version]' \
'--version[Print version]' \
":: :_accel-config_commands" \
"*::: :->accel-config" \
&& ret=0
    case $state in
    (accel-config)
        words=($line[1] "${words[@]}")
        (( CURRENT += 1 ))
        curcontext="${curcontext%:*:*}:accel-config-command-$line[1]:"
        case $line[1] in
            (default)
_arguments "${_arguments_options[@]}" : \
'--mixed_precision=[Mixed precision to write]:MIXED_PRECISION:(no fp16 bf16 fp8)' \
'--mixed-precision=[Mixed precision to write]:MIXED_PRECISION:(no fp16 bf16 fp8)' \
'--config_file=[Config file to read or write (default\: accelerate'\''s default config path)]:PATH:_files' \
'--config-file=[Config file to read or write (default\: accelerate'\''s default config path)]:PATH:_files' \
'-f[Overwrite an existing config file]' \
'--force[Overwrite an existing config file]' \
'-h[Print help (see more with '\''--help'\'')]' \
'--help[Print help (see more with '\''--help'\'')]' \
&& ret=0
;;
(update)
_arguments "${_arguments_options[@]}" : \
'--config_file=[Config file to read or write (default\: accelerate'\''s default config path)]:PATH:_files' \
'--config-file=[Config file to read or write (default\: accelerate'\''s default config path)]:PATH:_files' \
'-h[Print help (see more with '\''--help'\'')]' \
'--help[Print help (see more with '\''--help'\'')]' \
&& ret=0
;;
(show)
_arguments "${_arguments_options[@]}" : \
'--config_file=[Config file to read or write (default\: accelerate'\''s default config path)]:PATH:_files' \
'--config-file=[Config file to read or write (default\: accelerate'\''s default config path)]:PATH:_files' \
'--origin[Show where each value comes from\: a flag, an environment variable, file\:line, or default]' \
'--json[Print JSON (\`{"key"\: {"value"\: …, "origin"\: …}}\` with --origin)]' \
'-h[Print help (see more with '\''--help'\'')]' \
'--help[Print help (see more with '\''--help'\'')]' \
&& ret=0
;;
(get)
_arguments "${_arguments_options[@]}" : \
'--config_file=[Config file to read or write (default\: accelerate'\''s default config path)]:PATH:_files' \
'--config-file=[Config file to read or write (default\: accelerate'\''s default config path)]:PATH:_files' \
'--json[Print the value as JSON (lists and sections always are)]' \
'-h[Print help]' \
'--help[Print help]' \
':key -- Key to print; sections as `fsdp_config.fsdp_version`:_default' \
&& ret=0
;;
(set)
_arguments "${_arguments_options[@]}" : \
'--config_file=[Config file to read or write (default\: accelerate'\''s default config path)]:PATH:_files' \
'--config-file=[Config file to read or write (default\: accelerate'\''s default config path)]:PATH:_files' \
'-h[Print help (see more with '\''--help'\'')]' \
'--help[Print help (see more with '\''--help'\'')]' \
':key -- Key to set; sections as `fsdp_config.fsdp_version`:_default' \
':value -- New value, read as YAML would read it (`true`, `8`, `bf16`, `\[a, b\]`):_default' \
&& ret=0
;;
(validate)
_arguments "${_arguments_options[@]}" : \
'--config_file=[Config file to read or write (default\: accelerate'\''s default config path)]:PATH:_files' \
'--config-file=[Config file to read or write (default\: accelerate'\''s default config path)]:PATH:_files' \
'--accel_only[Check only that accel loads the file, not that accelerate would load it the same way]' \
'--accel-only[Check only that accel loads the file, not that accelerate would load it the same way]' \
'-h[Print help (see more with '\''--help'\'')]' \
'--help[Print help (see more with '\''--help'\'')]' \
'::file -- File to check (default\: --config_file, ACCEL_CONFIG_FILE or the default path):_files' \
&& ret=0
;;
(to-fsdp2)
_arguments "${_arguments_options[@]}" : \
'--output_file=[Write the converted config here (refused when it exists, unless --overwrite)]:PATH:_files' \
'--output-file=[Write the converted config here (refused when it exists, unless --overwrite)]:PATH:_files' \
'--config_file=[Config file to read or write (default\: accelerate'\''s default config path)]:PATH:_files' \
'--config-file=[Config file to read or write (default\: accelerate'\''s default config path)]:PATH:_files' \
'--overwrite[Overwrite the output file, or without --output_file the config file itself]' \
'-h[Print help (see more with '\''--help'\'')]' \
'--help[Print help (see more with '\''--help'\'')]' \
&& ret=0
;;
(to_fsdp2)
_arguments "${_arguments_options[@]}" : \
'--output_file=[Write the converted config here (refused when it exists, unless --overwrite)]:PATH:_files' \
'--output-file=[Write the converted config here (refused when it exists, unless --overwrite)]:PATH:_files' \
'--config_file=[Config file to read or write (default\: accelerate'\''s default config path)]:PATH:_files' \
'--config-file=[Config file to read or write (default\: accelerate'\''s default config path)]:PATH:_files' \
'--overwrite[Overwrite the output file, or without --output_file the config file itself]' \
'-h[Print help (see more with '\''--help'\'')]' \
'--help[Print help (see more with '\''--help'\'')]' \
&& ret=0
;;
(help)
_arguments "${_arguments_options[@]}" : \
":: :_accel-config__subcmd__help_commands" \
"*::: :->help" \
&& ret=0

    case $state in
    (help)
        words=($line[1] "${words[@]}")
        (( CURRENT += 1 ))
        curcontext="${curcontext%:*:*}:accel-config-help-command-$line[1]:"
        case $line[1] in
            (default)
_arguments "${_arguments_options[@]}" : \
&& ret=0
;;
(update)
_arguments "${_arguments_options[@]}" : \
&& ret=0
;;
(show)
_arguments "${_arguments_options[@]}" : \
&& ret=0
;;
(get)
_arguments "${_arguments_options[@]}" : \
&& ret=0
;;
(set)
_arguments "${_arguments_options[@]}" : \
&& ret=0
;;
(validate)
_arguments "${_arguments_options[@]}" : \
&& ret=0
;;
(to-fsdp2)
_arguments "${_arguments_options[@]}" : \
&& ret=0
;;
(help)
_arguments "${_arguments_options[@]}" : \
&& ret=0
;;
        esac
    ;;
esac
;;
        esac
    ;;
esac
}

(( $+functions[_accel-config_commands] )) ||
_accel-config_commands() {
    local commands; commands=(
'default:Write a config for this machine without asking\: all detected GPUs, or one CPU process' \
'update:Rewrite a config file with legacy and removed keys migrated, warning about each change' \
'show:Print the resolved config (file, ACCEL_CONFIG_* environment and defaults)' \
'get:Print one resolved value, bare, for scripts\: \`\$(accel-config get num_processes)\`' \
'set:Set one key in the config file (created if missing), validating the value first' \
'validate:Check that accel and accelerate both load a config file with the same values' \
'to-fsdp2:Convert an FSDP1 config to FSDP2, key for key as \`accelerate to-fsdp2\` does' \
'to_fsdp2:Convert an FSDP1 config to FSDP2, key for key as \`accelerate to-fsdp2\` does' \
'help:Print this message or the help of the given subcommand(s)' \
    )
    _describe -t commands 'accel-config commands' commands "$@"
}
(( $+functions[_accel-config__subcmd__default_commands] )) ||
_accel-config__subcmd__default_commands() {
    local commands; commands=()
    _describe -t commands 'accel-config default commands' commands "$@"
}
(( $+functions[_accel-config__subcmd__get_commands] )) ||
_accel-config__subcmd__get_commands() {
    local commands; commands=()
    _describe -t commands 'accel-config get commands' commands "$@"
}
(( $+functions[_accel-config__subcmd__help_commands] )) ||
_accel-config__subcmd__help_commands() {
    local commands; commands=(
'default:Write a config for this machine without asking\: all detected GPUs, or one CPU process' \
'update:Rewrite a config file with legacy and removed keys migrated, warning about each change' \
'show:Print the resolved config (file, ACCEL_CONFIG_* environment and defaults)' \
'get:Print one resolved value, bare, for scripts\: \`\$(accel-config get num_processes)\`' \
'set:Set one key in the config file (created if missing), validating the value first' \
'validate:Check that accel and accelerate both load a config file with the same values' \
'to-fsdp2:Convert an FSDP1 config to FSDP2, key for key as \`accelerate to-fsdp2\` does' \
'help:Print this message or the help of the given subcommand(s)' \
    )
    _describe -t commands 'accel-config help commands' commands "$@"
}
(( $+functions[_accel-config__subcmd__help__subcmd__default_commands] )) ||
_accel-config__subcmd__help__subcmd__default_commands() {
    local commands; commands=()
    _describe -t commands 'accel-config help default commands' commands "$@"
}
(( $+functions[_accel-config__subcmd__help__subcmd__get_commands] )) ||
_accel-config__subcmd__help__subcmd__get_commands() {
    local commands; commands=()
    _describe -t commands 'accel-config help get commands' commands "$@"
}
(( $+functions[_accel-config__subcmd__help__subcmd__help_commands] )) ||
_accel-config__subcmd__help__subcmd__help_commands() {
    local commands; commands=()
    _describe -t commands 'accel-config help help commands' commands "$@"
}
(( $+functions[_accel-config__subcmd__help__subcmd__set_commands] )) ||
_accel-config__subcmd__help__subcmd__set_commands() {
    local commands; commands=()
    _describe -t commands 'accel-config help set commands' commands "$@"
}
(( $+functions[_accel-config__subcmd__help__subcmd__show_commands] )) ||
_accel-config__subcmd__help__subcmd__show_commands() {
    local commands; commands=()
    _describe -t commands 'accel-config help show commands' commands "$@"
}
(( $+functions[_accel-config__subcmd__help__subcmd__to-fsdp2_commands] )) ||
_accel-config__subcmd__help__subcmd__to-fsdp2_commands() {
    local commands; commands=()
    _describe -t commands 'accel-config help to-fsdp2 commands' commands "$@"
}
(( $+functions[_accel-config__subcmd__help__subcmd__update_commands] )) ||
_accel-config__subcmd__help__subcmd__update_commands() {
    local commands; commands=()
    _describe -t commands 'accel-config help update commands' commands "$@"
}
(( $+functions[_accel-config__subcmd__help__subcmd__validate_commands] )) ||
_accel-config__subcmd__help__subcmd__validate_commands() {
    local commands; commands=()
    _describe -t commands 'accel-config help validate commands' commands "$@"
}
(( $+functions[_accel-config__subcmd__set_commands] )) ||
_accel-config__subcmd__set_commands() {
    local commands; commands=()
    _describe -t commands 'accel-config set commands' commands "$@"
}
(( $+functions[_accel-config__subcmd__show_commands] )) ||
_accel-config__subcmd__show_commands() {
    local commands; commands=()
    _describe -t commands 'accel-config show commands' commands "$@"
}
(( $+functions[_accel-config__subcmd__to-fsdp2_commands] )) ||
_accel-config__subcmd__to-fsdp2_commands() {
    local commands; commands=()
    _describe -t commands 'accel-config to-fsdp2 commands' commands "$@"
}
(( $+functions[_accel-config__subcmd__update_commands] )) ||
_accel-config__subcmd__update_commands() {
    local commands; commands=()
    _describe -t commands 'accel-config update commands' commands "$@"
}
(( $+functions[_accel-config__subcmd__validate_commands] )) ||
_accel-config__subcmd__validate_commands() {
    local commands; commands=()
    _describe -t commands 'accel-config validate commands' commands "$@"
}

if [ "$funcstack[1]" = "_accel-config" ]; then
    _accel-config "$@"
else
    compdef _accel-config accel-config
fi
