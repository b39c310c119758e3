complete -c accel-env -l config_file -l config-file -d 'Config file to report (default: accelerate\'s default config path)' -r -F
complete -c accel-env -l json -d 'Print JSON instead of Markdown'
complete -c accel-env -l no-python -l no_python -d 'Do not run Python to find torch/accelerate/numpy versions'
complete -c accel-env -s h -l help -d 'Print help (see more with \'--help\')'
complete -c accel-env -s V -l version -d 'Print version'
