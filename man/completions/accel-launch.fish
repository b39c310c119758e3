complete -c accel-launch -s h -l help -d 'Print help (see more with \'--help\')'
complete -c accel-launch -s V -l version -d 'Print version'
