# Print an optspec for argparse to handle cmd's options that are independent of any subcommand.
function __fish_accel_config_global_optspecs
    string join \n config_file= h/help V/version
end

function __fish_accel_config_needs_command
    # Figure out if the current invocation already has a command.
    set -l cmd (commandline -opc)
    set -e cmd[1]
    argparse -s (__fish_accel_config_global_optspecs) -- $cmd 2>/dev/null
    or return
    if set -q argv[1]
        # Also print the command, so this can be used to figure out what it is.
        echo $argv[1]
        return 1
    end
    return 0
end

function __fish_accel_config_using_subcommand
    set -l cmd (__fish_accel_config_needs_command)
    test -z "$cmd"
    and return 1
    contains -- $cmd[1] $argv
end

complete -c accel-config -n "__fish_accel_config_needs_command" -l config_file -l config-file -d 'Config file to read or write (default: accelerate\'s default config path)' -r -F
complete -c accel-config -n "__fish_accel_config_needs_command" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c accel-config -n "__fish_accel_config_needs_command" -s V -l version -d 'Print version'
complete -c accel-config -n "__fish_accel_config_needs_command" -f -a "default" -d 'Write a config for this machine without asking: all detected GPUs, or one CPU process'
complete -c accel-config -n "__fish_accel_config_needs_command" -f -a "update" -d 'Rewrite a config file with legacy and removed keys migrated, warning about each change'
complete -c accel-config -n "__fish_accel_config_needs_command" -f -a "show" -d 'Print the resolved config (file, ACCEL_CONFIG_* environment and defaults)'
complete -c accel-config -n "__fish_accel_config_needs_command" -f -a "get" -d 'Print one resolved value, bare, for scripts: `$(accel-config get num_processes)`'
complete -c accel-config -n "__fish_accel_config_needs_command" -f -a "set" -d 'Set one key in the config file (created if missing), validating the value first'
complete -c accel-config -n "__fish_accel_config_needs_command" -f -a "validate" -d 'Check that accel and accelerate both load a config file with the same values'
complete -c accel-config -n "__fish_accel_config_needs_command" -f -a "to-fsdp2" -d 'Convert an FSDP1 config to FSDP2, key for key as `accelerate to-fsdp2` does'
complete -c accel-config -n "__fish_accel_config_needs_command" -f -a "to_fsdp2" -d 'Convert an FSDP1 config to FSDP2, key for key as `accelerate to-fsdp2` does'
complete -c accel-config -n "__fish_accel_config_needs_command" -f -a "help" -d 'Print this message or the help of the given subcommand(s)'
complete -c accel-config -n "__fish_accel_config_using_subcommand default" -l mixed_precision -l mixed-precision -d 'Mixed precision to write' -r -f -a "no\t''
fp16\t''
bf16\t''
fp8\t''"
complete -c accel-config -n "__fish_accel_config_using_subcommand default" -l config_file -l config-file -d 'Config file to read or write (default: accelerate\'s default config path)' -r -F
complete -c accel-config -n "__fish_accel_config_using_subcommand default" -s f -l force -d 'Overwrite an existing config file'
complete -c accel-config -n "__fish_accel_config_using_subcommand default" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c accel-config -n "__fish_accel_config_using_subcommand update" -l config_file -l config-file -d 'Config file to read or write (default: accelerate\'s default config path)' -r -F
complete -c accel-config -n "__fish_accel_config_using_subcommand update" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c accel-config -n "__fish_accel_config_using_subcommand show" -l config_file -l config-file -d 'Config file to read or write (default: accelerate\'s default config path)' -r -F
complete -c accel-config -n "__fish_accel_config_using_subcommand show" -l origin -d 'Show where each value comes from: a flag, an environment variable, file:line, or default'
complete -c accel-config -n "__fish_accel_config_using_subcommand show" -l json -d 'Print JSON (`{"key": {"value": …, "origin": …}}` with --origin)'
complete -c accel-config -n "__fish_accel_config_using_subcommand show" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c accel-config -n "__fish_accel_config_using_subcommand get" -l config_file -l config-file -d 'Config file to read or write (default: accelerate\'s default config path)' -r -F
complete -c accel-config -n "__fish_accel_config_using_subcommand get" -l json -d 'Print the value as JSON (lists and sections always are)'
complete -c accel-config -n "__fish_accel_config_using_subcommand get" -s h -l help -d 'Print help'
complete -c accel-config -n "__fish_accel_config_using_subcommand set" -l config_file -l config-file -d 'Config file to read or write (default: accelerate\'s default config path)' -r -F
complete -c accel-config -n "__fish_accel_config_using_subcommand set" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c accel-config -n "__fish_accel_config_using_subcommand validate" -l config_file -l config-file -d 'Config file to read or write (default: accelerate\'s default config path)' -r -F
complete -c accel-config -n "__fish_accel_config_using_subcommand validate" -l accel_only -l accel-only -d 'Check only that accel loads the file, not that accelerate would load it the same way'
complete -c accel-config -n "__fish_accel_config_using_subcommand validate" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c accel-config -n "__fish_accel_config_using_subcommand to-fsdp2" -l output_file -l output-file -d 'Write the converted config here (refused when it exists, unless --overwrite)' -r -F
complete -c accel-config -n "__fish_accel_config_using_subcommand to-fsdp2" -l config_file -l config-file -d 'Config file to read or write (default: accelerate\'s default config path)' -r -F
complete -c accel-config -n "__fish_accel_config_using_subcommand to-fsdp2" -l overwrite -d 'Overwrite the output file, or without --output_file the config file itself'
complete -c accel-config -n "__fish_accel_config_using_subcommand to-fsdp2" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c accel-config -n "__fish_accel_config_using_subcommand to_fsdp2" -l output_file -l output-file -d 'Write the converted config here (refused when it exists, unless --overwrite)' -r -F
complete -c accel-config -n "__fish_accel_config_using_subcommand to_fsdp2" -l config_file -l config-file -d 'Config file to read or write (default: accelerate\'s default config path)' -r -F
complete -c accel-config -n "__fish_accel_config_using_subcommand to_fsdp2" -l overwrite -d 'Overwrite the output file, or without --output_file the config file itself'
complete -c accel-config -n "__fish_accel_config_using_subcommand to_fsdp2" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c accel-config -n "__fish_accel_config_using_subcommand help; and not __fish_seen_subcommand_from default update show get set validate to-fsdp2 help" -f -a "default" -d 'Write a config for this machine without asking: all detected GPUs, or one CPU process'
complete -c accel-config -n "__fish_accel_config_using_subcommand help; and not __fish_seen_subcommand_from default update show get set validate to-fsdp2 help" -f -a "update" -d 'Rewrite a config file with legacy and removed keys migrated, warning about each change'
complete -c accel-config -n "__fish_accel_config_using_subcommand help; and not __fish_seen_subcommand_from default update show get set validate to-fsdp2 help" -f -a "show" -d 'Print the resolved config (file, ACCEL_CONFIG_* environment and defaults)'
complete -c accel-config -n "__fish_accel_config_using_subcommand help; and not __fish_seen_subcommand_from default update show get set validate to-fsdp2 help" -f -a "get" -d 'Print one resolved value, bare, for scripts: `$(accel-config get num_processes)`'
complete -c accel-config -n "__fish_accel_config_using_subcommand help; and not __fish_seen_subcommand_from default update show get set validate to-fsdp2 help" -f -a "set" -d 'Set one key in the config file (created if missing), validating the value first'
complete -c accel-config -n "__fish_accel_config_using_subcommand help; and not __fish_seen_subcommand_from default update show get set validate to-fsdp2 help" -f -a "validate" -d 'Check that accel and accelerate both load a config file with the same values'
complete -c accel-config -n "__fish_accel_config_using_subcommand help; and not __fish_seen_subcommand_from default update show get set validate to-fsdp2 help" -f -a "to-fsdp2" -d 'Convert an FSDP1 config to FSDP2, key for key as `accelerate to-fsdp2` does'
complete -c accel-config -n "__fish_accel_config_using_subcommand help; and not __fish_seen_subcommand_from default update show get set validate to-fsdp2 help" -f -a "help" -d 'Print this message or the help of the given subcommand(s)'
