complete -c accel-test -s h -l help -d 'Print help (see more with \'--help\')'
complete -c accel-test -s V -l version -d 'Print version'
