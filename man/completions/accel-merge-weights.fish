complete -c accel-merge-weights -s h -l help -d 'Print help (see more with \'--help\')'
complete -c accel-merge-weights -s V -l version -d 'Print version'
