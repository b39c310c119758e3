_accel__estimate__memory() {
    local i cur prev opts cmd
    COMPREPLY=()
    if [[ "${BASH_VERSINFO[0]}" -ge 4 ]]; then
        cur="$2"
    else
        cur="${COMP_WORDS[COMP_CWORD]}"
    fi
    prev="$3"
    cmd=""
    opts=""

    for i in "${COMP_WORDS[@]:0:COMP_CWORD}"
    do
        case "${cmd},${i}" in
            ",$1")
                cmd="accel__estimate__memory"
                ;;
            *)
                ;;
        esac
    done

    case "${cmd}" in
        accel__estimate__memory)
            opts="-h -V --library-name --library_name --dtypes --trust-remote-code --trust_remote_code --json --from --revision --strategy --num-gpus --num_gpus --offload --precision --batch-size --batch_size --seq-len --seq_len --grad-checkpointing --grad_checkpointing --attn-implementation --attn_implementation --context --dtype --kv-dtype --kv_dtype --gpu-memory --gpu_memory --help --version"
            if [[ ${cur} == -* || ${COMP_CWORD} -eq 1 ]] ; then
                COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
                return 0
            fi
            case "${prev}" in
                --library_name)
                    COMPREPLY=($(compgen -W "timm transformers" -- "${cur}"))
                    return 0
                    ;;
                --library-name)
                    COMPREPLY=($(compgen -W "timm transformers" -- "${cur}"))
                    return 0
                    ;;
                --dtypes)
                    COMPREPLY=($(compgen -W "float32 float16 int8 int4" -- "${cur}"))
                    return 0
                    ;;
                --from)
                    COMPREPLY=($(compgen -W "auto config weights" -- "${cur}"))
                    return 0
                    ;;
                --revision)
                    COMPREPLY=("${cur}")
                    if [[ "${BASH_VERSINFO[0]}" -ge 4 ]]; then
                        compopt -o nospace
                    fi
                    return 0
                    ;;
                --strategy)
                    COMPREPLY=($(compgen -W "ddp fsdp zero1 zero2 zero3" -- "${cur}"))
                    return 0
                    ;;
                --num_gpus)
                    COMPREPLY=("${cur}")
                    if [[ "${BASH_VERSINFO[0]}" -ge 4 ]]; then
                        compopt -o nospace
                    fi
                    return 0
                    ;;
                --num-gpus)
                    COMPREPLY=("${cur}")
                    if [[ "${BASH_VERSINFO[0]}" -ge 4 ]]; then
                        compopt -o nospace
                    fi
                    return 0
                    ;;
                --precision)
                    COMPREPLY=($(compgen -W "fp32 bf16 fp16" -- "${cur}"))
                    return 0
                    ;;
                --batch_size)
                    COMPREPLY=("${cur}")
                    if [[ "${BASH_VERSINFO[0]}" -ge 4 ]]; then
                        compopt -o nospace
                    fi
                    return 0
                    ;;
                --batch-size)
                    COMPREPLY=("${cur}")
                    if [[ "${BASH_VERSINFO[0]}" -ge 4 ]]; then
                        compopt -o nospace
                    fi
                    return 0
                    ;;
                --seq_len)
                    COMPREPLY=("${cur}")
                    if [[ "${BASH_VERSINFO[0]}" -ge 4 ]]; then
                        compopt -o nospace
                    fi
                    return 0
                    ;;
                --seq-len)
                    COMPREPLY=("${cur}")
                    if [[ "${BASH_VERSINFO[0]}" -ge 4 ]]; then
                        compopt -o nospace
                    fi
                    return 0
                    ;;
                --attn_implementation)
                    COMPREPLY=($(compgen -W "eager sdpa flash_attention_2 flash_attention_3 flex_attention" -- "${cur}"))
                    return 0
                    ;;
                --attn-implementation)
                    COMPREPLY=($(compgen -W "eager sdpa flash_attention_2 flash_attention_3 flex_attention" -- "${cur}"))
                    return 0
                    ;;
                --context)
                    COMPREPLY=("${cur}")
                    if [[ "${BASH_VERSINFO[0]}" -ge 4 ]]; then
                        compopt -o nospace
                    fi
                    return 0
                    ;;
                --dtype)
                    COMPREPLY=($(compgen -W "float32 float16 bfloat16 fp8 int8 int4" -- "${cur}"))
                    return 0
                    ;;
                --kv_dtype)
                    COMPREPLY=($(compgen -W "float32 float16 bfloat16 fp8 int8 int4" -- "${cur}"))
                    return 0
                    ;;
                --kv-dtype)
                    COMPREPLY=($(compgen -W "float32 float16 bfloat16 fp8 int8 int4" -- "${cur}"))
                    return 0
                    ;;
                --gpu_memory)
                    COMPREPLY=("${cur}")
                    if [[ "${BASH_VERSINFO[0]}" -ge 4 ]]; then
                        compopt -o nospace
                    fi
                    return 0
                    ;;
                --gpu-memory)
                    COMPREPLY=("${cur}")
                    if [[ "${BASH_VERSINFO[0]}" -ge 4 ]]; then
                        compopt -o nospace
                    fi
                    return 0
                    ;;
                *)
                    COMPREPLY=()
                    ;;
            esac
            COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
            return 0
            ;;
    esac
}

if [[ "${BASH_VERSINFO[0]}" -eq 4 && "${BASH_VERSINFO[1]}" -ge 4 || "${BASH_VERSINFO[0]}" -gt 4 ]]; then
    complete -F _accel__estimate__memory -o nosort -o bashdefault -o default accel-estimate-memory
else
    complete -F _accel__estimate__memory -o bashdefault -o default accel-estimate-memory
fi
