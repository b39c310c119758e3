complete -c accel-estimate-memory -s h -l help -d 'Print help (see more with \'--help\')'
complete -c accel-estimate-memory -s V -l version -d 'Print version'
