//! The questions of `accelerate config` for "This machine" (accelerate 1.15, `commands/config/cluster.py`
//! `get_cluster_input`), in the same order, with the same prompts, menus, defaults and conditions, and
//! the mapping `ClusterConfig.to_dict()` would produce from the same answers.
//!
//! Where accelerate asks `is_*_available()` through torch, accel decides without Python: the questions
//! are the same, installation checks (DeepSpeed, FP8 libraries, transformers) are left to the launch,
//! and the device word in the `gpu_ids` prompt follows the machine type chosen. Deliberate differences
//! are noted where they happen.

use std::io;
use std::path::{Component, Path, PathBuf};

use serde_json::{Map, Value};

use super::fields::Fields;
use super::QuestionnaireError;
use crate::config::schema;

/// The machine-type menu, in accelerate's order, with the `distributed_type` each entry sets.
pub const MACHINE_TYPES: &[(&str, &str)] = &[
    ("No distributed training", "NO"),
    ("multi-CPU", "MULTI_CPU"),
    ("multi-XPU", "MULTI_XPU"),
    ("multi-HPU", "MULTI_HPU"),
    ("multi-GPU", "MULTI_GPU"),
    ("multi-NPU", "MULTI_NPU"),
    ("multi-MLU", "MULTI_MLU"),
    ("multi-SDAA", "MULTI_SDAA"),
    ("multi-MUSA", "MULTI_MUSA"),
    ("multi-NEURON", "MULTI_NEURON"),
    ("TPU", "XLA"),
];

/// `config_utils.DYNAMO_BACKENDS`: the schema's backends without `NO` (asked for separately) and the
/// two device backends accelerate's menu leaves out. accelerate lists `TORHCHXLA_TRACE_ONCE`, which its
/// own `DynamoBackend` enum rejects (choosing it is a traceback); the valid spelling is offered here.
fn dynamo_backends() -> &'static [&'static str] {
    let all = crate::config::schema::DYNAMO_BACKENDS;
    &all[1..all.len() - 2]
}
const TORCH_DYNAMO_MODES: &[&str] = &["default", "reduce-overhead", "max-autotune"];
// The menus of `accelerate.utils.constants` are the schema's value lists, in the same order (the order
// is what number keys pick): one list serves validation and the menu.
use schema::{
    AMAX_COMPUTE_ALGOS, AUTO_WRAP_POLICIES as FSDP_AUTO_WRAP_POLICIES,
    BACKWARD_PREFETCH as FSDP_BACKWARD_PREFETCH, CP_COMM_STRATEGIES,
    DS_LAUNCHERS as DEEPSPEED_MULTINODE_LAUNCHERS, FP8_FORMATS, MIXED_PRECISION, MSAMP_OPT_LEVELS,
    OFFLOAD_DEVICES as DEEPSPEED_OFFLOAD_DEVICES, SHARDING_STRATEGIES as FSDP_SHARDING_STRATEGIES,
    STATE_DICT_TYPES as FSDP_STATE_DICT_TYPES,
};
/// FSDP2 offers only two state-dict types, sharded first (`cluster.py`, `fsdp_version == 2`).
const FSDP2_STATE_DICT_TYPES: &[&str] = &["SHARDED_STATE_DICT", "FULL_STATE_DICT"];

/// Above this many machines the rank is typed rather than picked from a menu of every rank.
const MAX_RANK_MENU: i64 = 128;

/// Every `MULTI_*` type.
fn is_multi(dt: &str) -> bool {
    dt.starts_with("MULTI_")
}

/// The multi-accelerator types (every `MULTI_*` but CPU).
fn is_multi_accelerator(dt: &str) -> bool {
    is_multi(dt) && dt != "MULTI_CPU"
}

/// accelerate's `is_mps_available()`: Apple-silicon Macs only.
fn mps_available() -> bool {
    cfg!(all(target_os = "macos", target_arch = "aarch64"))
}

/// What the user's environment needs to expand `~` and make paths absolute.
pub struct Context {
    pub home: Option<String>,
    pub cwd: Option<PathBuf>,
}

/// `os.path.expanduser`, with the user's `$HOME` as the questionnaire saw it.
fn expand_user(path: &str, ctx: &Context) -> String {
    crate::config::expand_user(path, ctx.home.as_deref())
        .display()
        .to_string()
}

/// `os.path.abspath`: joined to the working directory and normalised lexically.
fn abspath(path: &str, ctx: &Context) -> String {
    let p = Path::new(path);
    let joined = match (&ctx.cwd, p.is_absolute()) {
        (Some(cwd), false) => cwd.join(p),
        _ => p.to_path_buf(),
    };
    let mut out = PathBuf::new();
    for c in joined.components() {
        match c {
            Component::ParentDir => {
                out.pop();
            }
            Component::CurDir => {}
            other => out.push(other),
        }
    }
    out.display().to_string()
}

fn gpu_ids_check(s: &str) -> Result<(), String> {
    if s.eq_ignore_ascii_case("all")
        || s.split(',').all(|id| {
            let id = id.trim();
            !id.is_empty() && id.bytes().all(|b| b.is_ascii_digit())
        })
    {
        Ok(())
    } else {
        Err("Please enter `all` or device ids separated by commas, such as 0,1.".into())
    }
}

/// Splits a comma-separated answer. accelerate keeps empty pieces (an empty answer gives `['']`).
fn comma_list(s: &str) -> Vec<Value> {
    s.split(',')
        .map(str::trim)
        .filter(|p| !p.is_empty())
        .map(Value::from)
        .collect()
}

fn set(m: &mut Map<String, Value>, key: &str, value: impl Into<Value>) {
    m.insert(key.to_string(), value.into());
}

/// Asks the questions and returns the config mapping, or why it cannot be written.
pub fn ask(q: &mut Fields<'_>, ctx: &Context) -> Result<Map<String, Value>, QuestionnaireError> {
    let env = q.options(
        "In which compute environment are you running?",
        &["This machine", "AWS (Amazon SageMaker)"],
        0,
    )?;
    if env == 1 {
        return Err(QuestionnaireError::SageMaker);
    }
    cluster(q, ctx)
}

/// `get_cluster_input`, one step per block of accelerate's questions, in its order; each step asks
/// only when accelerate would and otherwise keeps accelerate's default.
fn cluster(q: &mut Fields<'_>, ctx: &Context) -> Result<Map<String, Value>, QuestionnaireError> {
    let labels: Vec<&str> = MACHINE_TYPES.iter().map(|(l, _)| *l).collect();
    let mut dt = MACHINE_TYPES[q.options("Which type of machine are you using?", &labels, 0)?].1;

    let machines = machines(q, dt)?;
    let use_cpu = use_cpu(q, dt)?;
    let mpirun_config = mpirun(q, ctx, dt, use_cpu)?;
    let dynamo_config = dynamo(q)?;
    let use_mps = !use_cpu && mps_available();
    let (deepspeed_config, use_deepspeed_config) =
        deepspeed_plugin(q, &mut dt, machines.num_machines, use_mps)?;
    let fsdp_config = fsdp_plugin(q, &mut dt)?;
    let parallelism_config = parallelism_plugin(q, &fsdp_config)?;
    let megatron_lm_config = megatron_plugin(q, &mut dt)?;
    let num_processes = num_processes(q, dt, machines.num_machines)?;
    let gpu_ids = gpu_ids(q, dt, use_cpu, use_mps)?;
    let enable_cpu_affinity = cpu_affinity(q, dt, use_cpu, use_mps)?;

    let mut fp8_config = Map::new();
    let (main_training_function, mixed_precision, tpu) = if dt == "XLA" {
        let (function, tpu) = xla(q, ctx)?;
        (function, Some("no"), tpu)
    } else {
        let mp = mixed_precision(q, dt, use_deepspeed_config, &mut fp8_config)?;
        ("main".to_string(), mp, Tpu::default())
    };

    if dynamo_config.is_some() && mixed_precision == Some("no") && !use_cpu {
        // accelerate says here that it will enable TF32 at launch; accelerate 1.15 does not, so
        // neither message nor launch claims it.
        q.say("Torch dynamo used without mixed precision requires TF32 to be efficient: consider enabling it in your script (torch.backends.cuda.matmul.allow_tf32 = True).");
    }

    Ok(Answers {
        distributed_type: dt,
        num_processes,
        gpu_ids,
        mixed_precision,
        machines,
        main_training_function,
        sections: Sections {
            fp8_config,
            deepspeed_config,
            fsdp_config,
            parallelism_config,
            megatron_lm_config,
            mpirun_config,
            dynamo_config: dynamo_config.unwrap_or_default(),
        },
        use_cpu,
        tpu,
        enable_cpu_affinity,
    }
    .into_dict())
}

/// The answers about the machines of a `MULTI_*` job, or accelerate's defaults for one machine.
#[derive(Debug)]
struct Machines {
    machine_rank: i64,
    num_machines: i64,
    main_process_ip: Option<String>,
    main_process_port: Option<i64>,
    rdzv_backend: String,
    same_network: bool,
    debug: bool,
}

impl Default for Machines {
    fn default() -> Self {
        Machines {
            machine_rank: 0,
            num_machines: 1,
            main_process_ip: None,
            main_process_port: None,
            rdzv_backend: "static".to_string(),
            // The questionnaire's default; the dataclass default (what `config default` writes) is
            // false.
            same_network: true,
            debug: false,
        }
    }
}

/// How many machines, and for more than one where this one stands and how they meet; then whether
/// distributed operations are checked. Asked for `MULTI_*` types only.
fn machines(q: &mut Fields<'_>, dt: &str) -> io::Result<Machines> {
    let mut m = Machines::default();
    if !is_multi(dt) {
        return Ok(m);
    }
    m.num_machines = q.int(
        "How many different machines will you use (use more than 1 for multi-node training)? [1]: ",
        Some(1),
        1,
        i64::MAX,
    )?;
    if m.num_machines > 1 {
        main_process(q, &mut m)?;
    }
    m.debug = q.yes_no(
        "Should distributed operations be checked while running for errors? This can avoid timeout issues but will be slower. [yes/NO]: ",
        false,
    )?;
    Ok(m)
}

/// This machine's rank, the main process's address and port, and the rendezvous of machines on
/// different networks.
fn main_process(q: &mut Fields<'_>, m: &mut Machines) -> io::Result<()> {
    m.machine_rank = if m.num_machines <= MAX_RANK_MENU {
        let ranks: Vec<String> = (0..m.num_machines).map(|r| r.to_string()).collect();
        q.options("What is the rank of this machine?", &ranks, 0)? as i64
    } else {
        q.int(
            "What is the rank of this machine? ",
            None,
            0,
            m.num_machines - 1,
        )?
    };
    m.main_process_ip = Some(q.text(
        "What is the IP address of the machine that will host the main process? ",
        None,
    )?);
    m.main_process_port = Some(q.int(
        "What is the port you will use to communicate with the main process? ",
        None,
        0,
        65535,
    )?);
    m.same_network = q.yes_no(
        "Are all the machines on the same local network? Answer `no` if nodes are on the cloud and/or on different network hosts [YES/no]: ",
        true,
    )?;
    if !m.same_network {
        m.rdzv_backend = q.text_checked(
            "What rendezvous backend will you use? ('static', 'c10d', ...): ",
            Some("static"),
            rdzv_backend_check,
        )?;
    }
    Ok(())
}

/// A rendezvous backend the schema accepts (the schema's choices, when it lists any).
fn rdzv_backend_check(s: &str) -> Result<(), String> {
    match schema::top("rdzv_backend").map(|k| k.kind) {
        Some(schema::Kind::Choice { values, .. }) if !values.contains(&s) => {
            Err(format!("Please enter one of: {}.", values.join(", ")))
        }
        _ => Ok(()),
    }
}

/// CPU only: asked without distributed training, implied by multi-CPU.
fn use_cpu(q: &mut Fields<'_>, dt: &str) -> io::Result<bool> {
    Ok(match dt {
        "NO" => q.yes_no(
            "Do you want to run your training on CPU only (even if a GPU / Apple Silicon / Ascend NPU device is available)? [yes/NO]:",
            false,
        )?,
        "MULTI_CPU" => true,
        _ => false,
    })
}

/// The `mpirun_config` section: whether a multi-CPU job is launched through mpirun, and its
/// hostfile.
fn mpirun(
    q: &mut Fields<'_>,
    ctx: &Context,
    dt: &str,
    use_cpu: bool,
) -> io::Result<Map<String, Value>> {
    let mut c = Map::new();
    if use_cpu
        && dt == "MULTI_CPU"
        && q.yes_no("Do you want accelerate to launch mpirun? [yes/NO]: ", false)?
    {
        let hostfile = q.text(
            "Please enter the path to the hostfile to use with mpirun [~/hostfile]: ",
            Some("~/hostfile"),
        )?;
        set(&mut c, "mpirun_hostfile", expand_user(hostfile.trim(), ctx));
    }
    Ok(c)
}

/// The `dynamo_config` section, or `None` when torch dynamo is not used.
fn dynamo(q: &mut Fields<'_>) -> io::Result<Option<Map<String, Value>>> {
    if !q.yes_no(
        "Do you wish to optimize your script with torch dynamo?[yes/NO]:",
        false,
    )? {
        return Ok(None);
    }
    let mut c = Map::new();
    let shown: Vec<String> = dynamo_backends().iter().map(|b| b.to_lowercase()).collect();
    let backend = q.options("Which dynamo backend would you like to use?", &shown, 2)?;
    // Stored upper-case: the value of accelerate's DynamoBackend enum.
    set(&mut c, "dynamo_backend", dynamo_backends()[backend]);
    let custom = q.yes_no(
        "Do you want to customize the defaults sent to torch.compile? [yes/NO]: ",
        false,
    )?;
    if custom {
        let mode = q.choose("Which mode do you want to use?", TORCH_DYNAMO_MODES, 0)?;
        set(&mut c, "dynamo_mode", mode);
        let fullgraph = q.yes_no(
            "Do you want the fullgraph mode or it is ok to break model into several subgraphs? [yes/NO]: ",
            false,
        )?;
        set(&mut c, "dynamo_use_fullgraph", fullgraph);
        let dynamic = q.yes_no(
            "Do you want to enable dynamic shape tracing? [yes/NO]: ",
            false,
        )?;
        set(&mut c, "dynamo_use_dynamic", dynamic);
        let regional = q.yes_no(
            "Do you want to enable regional compilation? [yes/NO]: ",
            false,
        )?;
        set(&mut c, "dynamo_use_regional_compilation", regional);
    }
    Ok(Some(c))
}

/// Whether DeepSpeed is used (the type becomes `DEEPSPEED`), its section, and whether a DeepSpeed
/// JSON file decides the precision. Asked for accelerators and no distribution, not on Apple
/// silicon.
fn deepspeed_plugin(
    q: &mut Fields<'_>,
    dt: &mut &'static str,
    num_machines: i64,
    use_mps: bool,
) -> Result<(Map<String, Value>, bool), QuestionnaireError> {
    let mut c = Map::new();
    let mut use_deepspeed_config = false;
    if !(is_multi_accelerator(dt) || *dt == "NO") || use_mps {
        return Ok((c, use_deepspeed_config));
    }
    if q.yes_no("Do you want to use DeepSpeed? [yes/NO]: ", false)? {
        if *dt == "MULTI_NEURON" {
            return Err(QuestionnaireError::Unsupported(
                "DeepSpeed is not supported on Neuron devices",
            ));
        }
        // accelerate asserts here that the deepspeed package is installed; accel cannot look
        // without Python, and the launch reports a missing DeepSpeed anyway.
        *dt = "DEEPSPEED";
    }
    if *dt == "DEEPSPEED" {
        deepspeed(q, &mut c, num_machines, &mut use_deepspeed_config)?;
    }
    Ok((c, use_deepspeed_config))
}

/// Whether FSDP is used on a multi-accelerator machine (the type becomes `FSDP`), and its section.
fn fsdp_plugin(
    q: &mut Fields<'_>,
    dt: &mut &'static str,
) -> Result<Map<String, Value>, QuestionnaireError> {
    let mut c = Map::new();
    if !is_multi_accelerator(dt) {
        return Ok(c);
    }
    let use_fsdp = q.yes_no(
        "Do you want to use FullyShardedDataParallel? [yes/NO]: ",
        false,
    )?;
    if use_fsdp {
        if *dt == "MULTI_NEURON" {
            return Err(QuestionnaireError::Unsupported(
                "FSDP is not currently supported on Neuron devices",
            ));
        }
        *dt = "FSDP";
    }
    if *dt == "FSDP" {
        fsdp(q, &mut c)?;
    }
    Ok(c)
}

/// The `parallelism_config` section, offered with FSDP2 only.
fn parallelism_plugin(
    q: &mut Fields<'_>,
    fsdp_config: &Map<String, Value>,
) -> io::Result<Map<String, Value>> {
    let mut c = Map::new();
    let fsdp_version = fsdp_config
        .get("fsdp_version")
        .and_then(Value::as_i64)
        .unwrap_or(1);
    if fsdp_version == 2
        && q.yes_no(
            "Do you want to use the parallelism config? [yes/NO]: ",
            false,
        )?
    {
        parallelism(q, &mut c)?;
    }
    Ok(c)
}

/// Whether Megatron-LM is used on multi-GPU (the type becomes `MEGATRON_LM`), and its section.
fn megatron_plugin(q: &mut Fields<'_>, dt: &mut &'static str) -> io::Result<Map<String, Value>> {
    let mut c = Map::new();
    if *dt == "MULTI_GPU" && q.yes_no("Do you want to use Megatron-LM ? [yes/NO]: ", false)? {
        *dt = "MEGATRON_LM";
        megatron(q, &mut c)?;
    }
    Ok(c)
}

/// What the number of processes counts, in the "How many ... should be used" prompt of a
/// `MULTI_*` or XLA type. accelerate derives the word from `str(DistributedType.X)`, hence "XLA(s)"
/// for TPUs.
fn processes_word(dt: &str) -> String {
    let kind = dt.trim_start_matches("MULTI_");
    match kind {
        "TPU" | "NEURON" => format!("{kind} cores"),
        "CPU" => "processes".to_string(),
        other => format!("{other}(s)"),
    }
}

/// `num_processes`: asked for `MULTI_*`, XLA and the GPU backends, 1 otherwise.
fn num_processes(q: &mut Fields<'_>, dt: &str, num_machines: i64) -> io::Result<i64> {
    if is_multi(dt) || dt == "XLA" {
        let prompt = format!(
            "How many {} should be used for distributed training? [1]:",
            processes_word(dt)
        );
        loop {
            let n = q.int(&prompt, Some(1), 1, i64::MAX)?;
            // accelerate raises a ValueError here (after every other answer was given); asking again
            // keeps those answers.
            if dt == "MULTI_GPU" && num_machines == 1 && n == 1 {
                q.say("multi-GPU with 1 GPU on a single machine is not distributed training: enter 2 or more, or press Ctrl-C and select `No distributed training` for the type of machine.");
                continue;
            }
            return Ok(n);
        }
    } else if matches!(dt, "FSDP" | "DEEPSPEED" | "MEGATRON_LM") {
        q.int(
            "How many GPU(s) should be used for distributed training? [1]:",
            Some(1),
            1,
            i64::MAX,
        )
    } else {
        Ok(1)
    }
}

/// The device in the `gpu_ids` prompt. accelerate names it from what torch finds installed; the
/// type chosen says the same.
fn device_word(dt: &str) -> &'static str {
    match dt {
        "MULTI_NPU" => "NPU(s)",
        "MULTI_MLU" => "MLU(s)",
        "MULTI_SDAA" => "SDAA(s)",
        "MULTI_MUSA" => "MUSA(s)",
        "MULTI_XPU" => "XPU(s)",
        "MULTI_HPU" => "HPU(s)",
        "MULTI_NEURON" => "Neuron cores",
        _ => "GPU(s)",
    }
}

/// `gpu_ids`, asked for accelerators (and no distribution) unless on CPU or Apple silicon.
fn gpu_ids(
    q: &mut Fields<'_>,
    dt: &str,
    use_cpu: bool,
    use_mps: bool,
) -> io::Result<Option<String>> {
    if !(is_multi_accelerator(dt) || dt == "NO") || use_cpu || use_mps {
        return Ok(None);
    }
    let prompt = format!(
        "What {} (by id) should be used for training on this machine as a comma-separated list? [all]:",
        device_word(dt)
    );
    Ok(Some(q.text_checked(&prompt, Some("all"), gpu_ids_check)?))
}

/// `enable_cpu_affinity`, asked for no distribution and multi-GPU, unless on CPU or Apple silicon.
fn cpu_affinity(q: &mut Fields<'_>, dt: &str, use_cpu: bool, use_mps: bool) -> io::Result<bool> {
    if !matches!(dt, "NO" | "MULTI_GPU") || use_cpu || use_mps {
        return Ok(false);
    }
    q.yes_no(
        "Would you like to enable numa efficiency? (Currently only supported on NVIDIA hardware). [yes/NO]: ",
        false,
    )
}

/// The TPU answers, as accelerate initialises them when they are not asked.
#[derive(Debug, Default)]
struct Tpu {
    commands: Option<Vec<Value>>,
    command_file: Option<String>,
    env: Vec<Value>,
    name: Option<String>,
    vm: Option<Vec<Value>>,
    zone: Option<String>,
    use_sudo: bool,
    use_cluster: bool,
}

/// XLA's questions: the function launched in every process, and the TPU cluster.
fn xla(q: &mut Fields<'_>, ctx: &Context) -> io::Result<(String, Tpu)> {
    let main_training_function = q.text(
        "What is the name of the function in your script that should be launched in all parallel scripts? [main]: ",
        Some("main"),
    )?;
    let mut tpu = Tpu {
        use_cluster: q.yes_no("Are you using a TPU cluster? [yes/NO]: ", false)?,
        ..Tpu::default()
    };
    if tpu.use_cluster {
        tpu_cluster(q, ctx, &mut tpu)?;
    }
    Ok((main_training_function, tpu))
}

/// The TPU cluster's name, zone, sudo, startup code, VMs and environment.
fn tpu_cluster(q: &mut Fields<'_>, ctx: &Context, tpu: &mut Tpu) -> io::Result<()> {
    tpu.name = Some(q.text("What is the name of your TPU cluster? ", None)?);
    tpu.zone = Some(q.text("What is the zone of your TPU cluster? ", None)?);
    // accelerate stores this answer as the raw string typed; a boolean is what it means.
    tpu.use_sudo = q.yes_no(
        "To run a python script in a TPU pod, should `sudo` be used? [yes/NO]: ",
        false,
    )?;
    let run_commands = q.yes_no(
        "Do you have code you wish to run on startup in each pod? [yes/NO]: ",
        false,
    )?;
    if run_commands {
        tpu_startup(q, ctx, tpu)?;
    }
    // Empty pieces are dropped: accelerate writes `['']` for an empty answer.
    tpu.vm = Some(comma_list(&q.text(
        "If not using an instance group, what are the names of the Compute VM instances to be used, separated by a comma: ",
        Some(""),
    )?));
    tpu.env = comma_list(&q.text(
        "What environment variables do you wish to set in each pod, separated by a comma: ",
        Some(""),
    )?);
    Ok(())
}

/// The code run on startup in each pod: a bash script, or commands typed one by one.
fn tpu_startup(q: &mut Fields<'_>, ctx: &Context, tpu: &mut Tpu) -> io::Result<()> {
    if q.yes_no("Is this code located in a bash script? [yes/NO]: ", false)? {
        let file = q.text("What is the path to your bash script? ", None)?;
        tpu.command_file = Some(abspath(&file, ctx));
        return Ok(());
    }
    q.say("Please enter each command separately you wish to run on startup in each pod.");
    let mut commands = Vec::new();
    loop {
        commands.push(Value::from(
            q.text("Please enter a single command to be ran ", None)?,
        ));
        if !q.yes_no("Do you wish to add another command? [yes/NO]: ", false)? {
            break;
        }
    }
    tpu.commands = Some(commands);
    Ok(())
}

/// `mixed_precision` off XLA (with fp8's section), or `None` when a DeepSpeed JSON file decides it
/// (no key is written then).
fn mixed_precision(
    q: &mut Fields<'_>,
    dt: &str,
    use_deepspeed_config: bool,
    fp8_config: &mut Map<String, Value>,
) -> io::Result<Option<&'static str>> {
    if dt == "DEEPSPEED" && use_deepspeed_config {
        return Ok(None);
    }
    let mp = q.choose("Do you wish to use mixed precision?", MIXED_PRECISION, 0)?;
    if mp == "fp8" {
        fp8(q, fp8_config)?;
    }
    Ok(Some(mp))
}

/// The sections of the config, each written only when it holds a key.
#[derive(Debug, Default)]
struct Sections {
    fp8_config: Map<String, Value>,
    deepspeed_config: Map<String, Value>,
    fsdp_config: Map<String, Value>,
    parallelism_config: Map<String, Value>,
    megatron_lm_config: Map<String, Value>,
    mpirun_config: Map<String, Value>,
    dynamo_config: Map<String, Value>,
}

/// Every answer of the questionnaire, as `ClusterConfig` holds them.
#[derive(Debug)]
struct Answers {
    distributed_type: &'static str,
    num_processes: i64,
    gpu_ids: Option<String>,
    mixed_precision: Option<&'static str>,
    machines: Machines,
    main_training_function: String,
    sections: Sections,
    use_cpu: bool,
    tpu: Tpu,
    enable_cpu_affinity: bool,
}

impl Answers {
    /// `ClusterConfig.to_dict()`: None values and empty sections are left out; lists stay, even
    /// empty. The keys are in accelerate's order.
    fn into_dict(self) -> Map<String, Value> {
        let Answers {
            distributed_type,
            num_processes,
            gpu_ids,
            mixed_precision,
            machines,
            main_training_function,
            sections,
            use_cpu,
            tpu,
            enable_cpu_affinity,
        } = self;
        let mut m = Map::new();
        set(&mut m, "compute_environment", "LOCAL_MACHINE");
        set(&mut m, "distributed_type", distributed_type);
        set(&mut m, "num_processes", num_processes);
        if let Some(ids) = gpu_ids {
            set(&mut m, "gpu_ids", ids);
        }
        if let Some(mp) = mixed_precision {
            set(&mut m, "mixed_precision", mp);
        }
        // accelerate then asks about `downcast_bf16` for XLA with bf16, which cannot happen (XLA
        // forces mixed_precision "no"), so it always writes its default answer, the string 'no'
        // (`commands/config/cluster.py`: `tpu_downcast_bf16 = "no"`). The same file is written
        // here, byte for byte; accel reads 'no' as false.
        set(&mut m, "downcast_bf16", "no");
        set(&mut m, "machine_rank", machines.machine_rank);
        set(&mut m, "num_machines", machines.num_machines);
        if let Some(ip) = machines.main_process_ip {
            set(&mut m, "main_process_ip", ip);
        }
        if let Some(port) = machines.main_process_port {
            set(&mut m, "main_process_port", port);
        }
        set(&mut m, "main_training_function", main_training_function);
        for (key, section) in [
            ("fp8_config", sections.fp8_config),
            ("deepspeed_config", sections.deepspeed_config),
            ("fsdp_config", sections.fsdp_config),
            ("parallelism_config", sections.parallelism_config),
            ("megatron_lm_config", sections.megatron_lm_config),
            ("mpirun_config", sections.mpirun_config),
            ("dynamo_config", sections.dynamo_config),
        ] {
            if !section.is_empty() {
                set(&mut m, key, Value::Object(section));
            }
        }
        set(&mut m, "use_cpu", use_cpu);
        set(&mut m, "rdzv_backend", machines.rdzv_backend);
        set(&mut m, "same_network", machines.same_network);
        if let Some(c) = tpu.commands {
            set(&mut m, "commands", c);
        }
        if let Some(f) = tpu.command_file {
            set(&mut m, "command_file", f);
        }
        set(&mut m, "tpu_env", tpu.env);
        if let Some(n) = tpu.name {
            set(&mut m, "tpu_name", n);
        }
        if let Some(v) = tpu.vm {
            set(&mut m, "tpu_vm", v);
        }
        if let Some(z) = tpu.zone {
            set(&mut m, "tpu_zone", z);
        }
        set(&mut m, "tpu_use_sudo", tpu.use_sudo);
        set(&mut m, "tpu_use_cluster", tpu.use_cluster);
        set(&mut m, "debug", machines.debug);
        set(&mut m, "enable_cpu_affinity", enable_cpu_affinity);
        m
    }
}

fn deepspeed(
    q: &mut Fields<'_>,
    c: &mut Map<String, Value>,
    num_machines: i64,
    use_deepspeed_config: &mut bool,
) -> io::Result<()> {
    *use_deepspeed_config = q.yes_no(
        "Do you want to specify a json file to a DeepSpeed config? [yes/NO]: ",
        false,
    )?;
    if *use_deepspeed_config {
        let file = q.text(
            "Please enter the path to the json DeepSpeed config file: ",
            Some("none"),
        )?;
        set(c, "deepspeed_config_file", file);
    } else {
        let stage = q.options(
            "What should be your DeepSpeed's ZeRO optimization stage?",
            &["0", "1", "2", "3"],
            2,
        )?;
        set(c, "zero_stage", stage);
        if stage >= 2 {
            let optimizer = q.choose(
                "Where to offload optimizer states?",
                DEEPSPEED_OFFLOAD_DEVICES,
                0,
            )?;
            set(c, "offload_optimizer_device", optimizer);
            let param = q.choose("Where to offload parameters?", DEEPSPEED_OFFLOAD_DEVICES, 0)?;
            set(c, "offload_param_device", param);
            if param == "nvme" {
                let p = q.text("Nvme Path to offload parameters?", Some("/nvme"))?;
                set(c, "offload_param_nvme_path", p);
            }
            if optimizer == "nvme" {
                let p = q.text("Nvme Path to offload optimizer states?", Some("/nvme"))?;
                set(c, "offload_optimizer_nvme_path", p);
            }
        }
        let steps = q.int(
            "How many gradient accumulation steps you're passing in your script? [1]: ",
            Some(1),
            1,
            i64::MAX,
        )?;
        set(c, "gradient_accumulation_steps", steps);
        if q.yes_no("Do you want to use gradient clipping? [yes/NO]: ", false)? {
            let clip = q.float("What is the gradient clipping value? [1.0]: ", 1.0)?;
            set(c, "gradient_clipping", clip);
        }
        if stage == 3 {
            let save16 = q.yes_no(
                "Do you want to save 16-bit model weights when using ZeRO Stage-3? [yes/NO]: ",
                false,
            )?;
            set(c, "zero3_save_16bit_model", save16);
        }
    }
    // Asked whatever the stage, as accelerate does (it then requires transformers at launch).
    let init = q.yes_no(
        "Do you want to enable `deepspeed.zero.Init` when using ZeRO Stage-3 for constructing massive models? [yes/NO]: ",
        false,
    )?;
    set(c, "zero3_init_flag", init);
    if q.yes_no(
        "Do you want to enable Mixture-of-Experts training (MoE)? [yes/NO]: ",
        false,
    )? {
        let names = q.text(
            "Specify the comma-separated list of transformers MoE layer class names (case-sensitive), e.g :  `MixtralSparseMoeBlock`, `Qwen2MoeSparseMoeBlock`, `JetMoEAttention,JetMoEBlock` ... : ",
            None,
        )?;
        set(c, "deepspeed_moe_layer_cls_names", names);
    }
    if num_machines > 1 {
        let launcher = q.choose(
            "Which Type of launcher do you want to use?",
            DEEPSPEED_MULTINODE_LAUNCHERS,
            0,
        )?;
        set(c, "deepspeed_multinode_launcher", launcher);
        if launcher != "standard" {
            let hostfile = q.text(
                "DeepSpeed configures multi-node compute resources with hostfile. Each row is of the format `hostname slots=[num_gpus]`, e.g., `localhost slots=2`; for more information please refer official [documentation](https://www.deepspeed.ai/getting-started/#resource-configuration-multi-node). Please specify the location of hostfile: ",
                None,
            )?;
            set(c, "deepspeed_hostfile", hostfile);
            if q.yes_no(
                "Do you want to specify exclusion filter string? [yes/NO]: ",
                false,
            )? {
                let f = q.text("DeepSpeed exclusion filter string: ", None)?;
                set(c, "deepspeed_exclusion_filter", f);
            }
            if q.yes_no(
                "Do you want to specify inclusion filter string? [yes/NO]: ",
                false,
            )? {
                let f = q.text("DeepSpeed inclusion filter string: ", None)?;
                set(c, "deepspeed_inclusion_filter", f);
            }
        }
    }
    Ok(())
}

fn fsdp(q: &mut Fields<'_>, c: &mut Map<String, Value>) -> io::Result<()> {
    let version = q.options("What should be your FSDP version? [2]: ", &["1", "2"], 1)? + 1;
    set(c, "fsdp_version", version);
    if version == 1 {
        let strategy = q.choose(
            "What should be your sharding strategy?",
            FSDP_SHARDING_STRATEGIES,
            0,
        )?;
        set(c, "fsdp_reshard_after_forward", strategy);
    } else {
        let reshard = q.yes_no(
            "Do you want to enable resharding after forward? [YES/no]: ",
            true,
        )?;
        set(c, "fsdp_reshard_after_forward", reshard);
    }
    let offload = q.yes_no(
        "Do you want to offload parameters and gradients to CPU? [yes/NO]: ",
        false,
    )?;
    set(c, "fsdp_offload_params", offload);
    let policy = q.choose(
        "What should be your auto wrap policy?",
        FSDP_AUTO_WRAP_POLICIES,
        0,
    )?;
    set(c, "fsdp_auto_wrap_policy", policy);
    if policy == "TRANSFORMER_BASED_WRAP" {
        let no_split = q.yes_no(
            "Do you want to use the model's `_no_split_modules` to wrap. Only applicable for 🤗 Transformers [yes/NO]: ",
            false,
        )?;
        if !no_split {
            let classes = q.text(
                "Specify the comma-separated list of transformer layer class names (case-sensitive) to wrap ,e.g, :`BertLayer`, `GPTJBlock`, `T5Block`, `BertLayer,BertEmbeddings,BertSelfOutput` ...? : ",
                None,
            )?;
            set(c, "fsdp_transformer_layer_cls_to_wrap", classes);
        }
    } else if policy == "SIZE_BASED_WRAP" {
        let min = q.int(
            "What should be your FSDP's minimum number of parameters for Default Auto Wrapping Policy? [1e8]: ",
            Some(100_000_000),
            0,
            i64::MAX,
        )?;
        set(c, "fsdp_min_num_params", min);
    }
    if version == 1 {
        let prefetch = q.choose(
            "What should be your FSDP's backward prefetch policy?",
            FSDP_BACKWARD_PREFETCH,
            0,
        )?;
        set(c, "fsdp_backward_prefetch", prefetch);
    }
    let types = if version == 1 {
        FSDP_STATE_DICT_TYPES
    } else {
        FSDP2_STATE_DICT_TYPES
    };
    let state_dict = q.choose("What should be your FSDP's state dict type?", types, 0)?;
    set(c, "fsdp_state_dict_type", state_dict);
    if version == 1 {
        let forward = q.yes_no(
            "Do you want to enable FSDP's forward prefetch policy? [yes/NO]: ",
            false,
        )?;
        set(c, "fsdp_forward_prefetch", forward);
        let orig = q.yes_no(
            "Do you want to enable FSDP's `use_orig_params` feature? [YES/no]: ",
            true,
        )?;
        set(c, "fsdp_use_orig_params", orig);
    }
    let ram = q.yes_no(
        "Do you want to enable CPU RAM efficient model loading? Only applicable for 🤗 Transformers models. [YES/no]: ",
        true,
    )?;
    set(c, "fsdp_cpu_ram_efficient_loading", ram);
    if version == 1 {
        let sync = ram
            || q.yes_no(
                "Do you want each individually wrapped FSDP unit to broadcast module parameters from rank 0 at the start? [YES/no]: ",
                true,
            )?;
        set(c, "fsdp_sync_module_states", sync);
    }
    let checkpointing = q.yes_no(
        "Do you want to enable FSDP activation checkpointing? [yes/NO]: ",
        false,
    )?;
    set(c, "fsdp_activation_checkpointing", checkpointing);
    Ok(())
}

fn parallelism(q: &mut Fields<'_>, c: &mut Map<String, Value>) -> io::Result<()> {
    for (key, prompt) in [
        (
            "parallelism_config_dp_replicate_size",
            "What is the data parallelism replicate size? [1]: ",
        ),
        (
            "parallelism_config_dp_shard_size",
            "What is the FSDP shard size? [1]: ",
        ),
        (
            "parallelism_config_tp_size",
            "What is the tensor parallelism size? [1]: ",
        ),
        (
            "parallelism_config_cp_size",
            "What is the context parallelism size? [1]: ",
        ),
    ] {
        let size = q.int(prompt, Some(1), 1, i64::MAX)?;
        set(c, key, size);
    }
    if c.get("parallelism_config_cp_size")
        .and_then(Value::as_i64)
        .unwrap_or(1)
        > 1
    {
        let strategy = q.choose(
            "What is the compute parallelism communication strategy?",
            CP_COMM_STRATEGIES,
            0,
        )?;
        set(c, "parallelism_config_cp_comm_strategy", strategy);
    }
    Ok(())
}

fn megatron(q: &mut Fields<'_>, c: &mut Map<String, Value>) -> io::Result<()> {
    let tp = q.int(
        "What is the Tensor Parallelism degree/size? [1]:",
        Some(1),
        1,
        i64::MAX,
    )?;
    set(c, "megatron_lm_tp_degree", tp);
    if tp > 1 {
        let sp = q.yes_no(
            "Do you want to enable Sequence Parallelism? [YES/no]: ",
            true,
        )?;
        set(c, "megatron_lm_sequence_parallelism", sp);
    }
    let pp = q.int(
        "What is the Pipeline Parallelism degree/size? [1]:",
        Some(1),
        1,
        i64::MAX,
    )?;
    set(c, "megatron_lm_pp_degree", pp);
    if pp > 1 {
        let micro = q.int(
            "What is the number of micro-batches? [1]:",
            Some(1),
            1,
            i64::MAX,
        )?;
        set(c, "megatron_lm_num_micro_batches", micro);
    }
    let recompute = q.yes_no(
        "Do you want to enable selective activation recomputation? [YES/no]: ",
        true,
    )?;
    set(c, "megatron_lm_recompute_activations", recompute);
    let distributed = q.yes_no(
        "Do you want to use distributed optimizer which shards optimizer state and gradients across data parallel ranks? [YES/no]: ",
        true,
    )?;
    set(c, "megatron_lm_use_distributed_optimizer", distributed);
    let clip = q.float(
        "What is the gradient clipping value based on global L2 Norm (0 to disable)? [1.0]: ",
        1.0,
    )?;
    set(c, "megatron_lm_gradient_clipping", clip);
    Ok(())
}

/// The fp8 questions. accelerate's questionnaire stores three answers under names its launcher never
/// reads (`amax_history_length`, `amax_compute_algorithm`, `optimization_level`, so the answers are
/// lost: `accelerate/utils/launch.py::setup_fp8_env` exports only `fp8_*` arguments); accel writes the names the launcher reads (`amax_history_len`,
/// `amax_compute_algo`, `opt_level`), which accelerate's launch then honours too. accelerate also
/// refuses here when the chosen FP8 library is not installed; accel leaves that to the launch.
fn fp8(q: &mut Fields<'_>, c: &mut Map<String, Value>) -> io::Result<()> {
    let backend = ["AO", "TE", "MSAMP"][q.options(
        "Which FP8 backend do you want to use?",
        &["ao", "te", "msamp"],
        0,
    )?];
    set(c, "backend", backend);
    match backend {
        "TE" => {
            let autocast = q.yes_no(
                "Do you want to use FP8 autocast during eval mode? Generally better metrics are found when this is disabled [yes/NO]: ",
                false,
            )?;
            set(c, "use_autocast_during_eval", autocast);
            let margin = q.int(
                "What margin should be used for gradient scaling? [0]: ",
                Some(0),
                0,
                i64::MAX,
            )?;
            set(c, "margin", margin);
            let interval = q.int(
                "What interval should be used for how often the scaling factor is recomputed? [1]: ",
                Some(1),
                1,
                i64::MAX,
            )?;
            set(c, "interval", interval);
            let format = q.choose("Which weight format should be used?", FP8_FORMATS, 0)?;
            set(c, "fp8_format", format);
            let history = q.int(
                "What length of history should be used for the amax scaling factor computation? [1024]: ",
                Some(1024),
                1,
                i64::MAX,
            )?;
            set(c, "amax_history_len", history);
            let algo = q.choose(
                "Which algorithm should be used for the amax scaling factor computation?",
                AMAX_COMPUTE_ALGOS,
                0,
            )?;
            set(c, "amax_compute_algo", algo);
            let higher = q.yes_no(
                "Do you want to execute `fprop`, `dgrad`, and `wgrad` GEMMS in higher precision? [yes/NO]: ",
                false,
            )?;
            let precision = if higher {
                vec![
                    q.yes_no(
                        "Should `fprop` be executed in higher precision? [yes/NO]: ",
                        false,
                    )?,
                    q.yes_no(
                        "Should `dgrad` be executed in higher precision? [yes/NO]: ",
                        false,
                    )?,
                    q.yes_no(
                        "Should `wgrad` be executed in higher precision? [yes/NO]: ",
                        false,
                    )?,
                ]
            } else {
                vec![false, false, false]
            };
            // accelerate's tuple, which YAML writes as a list.
            set(c, "override_linear_precision", precision);
        }
        "MSAMP" => {
            let level = q.choose(
                "Which optimization level should be used?",
                MSAMP_OPT_LEVELS,
                1,
            )?;
            set(c, "opt_level", level);
        }
        _ => {
            let gather = q.yes_no(
                "Do you want to enable FSDP2 float8 all gather? This is recommended for better performance if using FSDP2. [YES/no]: ",
                true,
            )?;
            set(c, "enable_fsdp_float8_all_gather", gather);
            let pad = q.yes_no(
                "Do you want to pad the inner dimension of weight matrices before float8 matmuls? This is required for _scaled_mm which has strict alignment requirements. Note: padding may cause memory spikes. [YES/no]: ",
                true,
            )?;
            set(c, "pad_inner_dim", pad);
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::super::prompt::script::{Answer, Answer::*, Script};
    use super::*;
    use crate::config::{file, Document, Format};
    use serde_json::json;

    fn ctx() -> Context {
        Context {
            home: Some("/home/u".into()),
            cwd: Some(PathBuf::from("/work/run")),
        }
    }

    /// Runs the flow on scripted answers; every answer must be used, and the result must be a config
    /// the core accepts without warnings.
    fn run(answers: Vec<Answer>) -> (Result<Map<String, Value>, QuestionnaireError>, Script) {
        let mut script = Script::new(answers);
        let result = ask(&mut Fields { io: &mut script }, &ctx());
        if let Ok(map) = &result {
            assert!(
                script.answers.is_empty(),
                "unused answers: {:?}",
                script.answers
            );
            for format in ["c.yaml", "c.json", "c.toml"] {
                let path = Path::new(format);
                let text = file::render(map, Format::from_path(path)).unwrap();
                let loaded =
                    crate::config::normalize(Document::parse(path, text).unwrap()).unwrap();
                assert!(loaded.warnings.is_empty(), "{:?}", loaded.warnings);
            }
        }
        (result, script)
    }

    fn ok(answers: Vec<Answer>) -> (Map<String, Value>, Script) {
        let (result, script) = run(answers);
        match result {
            Ok(map) => (map, script),
            Err(e) => panic!("{e}; asked {:#?}", script.asked),
        }
    }

    #[test]
    fn fsdp1_size_based_wrap() {
        let (m, s) = ok(vec![
            Enter,
            Pick(4),
            Text(""),
            Text(""),
            Text(""),
            Text(""),
            Text("yes"),
            Pick(0),
            Pick(3),
            Text(""),
            Pick(1),
            Text("1e7"),
            Pick(1),
            Pick(2),
            Text("yes"),
            Text(""),
            Text("no"),
            Text("no"),
            Text(""),
            Text("8"),
            Pick(1),
        ]);
        assert_eq!(m["distributed_type"], "FSDP");
        assert_eq!(m["num_processes"], 8);
        assert_eq!(m["mixed_precision"], "fp16");
        assert_eq!(
            m["fsdp_config"],
            json!({
                "fsdp_version": 1,
                "fsdp_reshard_after_forward": "HYBRID_SHARD",
                "fsdp_offload_params": false,
                "fsdp_auto_wrap_policy": "SIZE_BASED_WRAP",
                "fsdp_min_num_params": 10_000_000,
                "fsdp_backward_prefetch": "BACKWARD_POST",
                "fsdp_state_dict_type": "SHARDED_STATE_DICT",
                "fsdp_forward_prefetch": true,
                "fsdp_use_orig_params": true,
                "fsdp_cpu_ram_efficient_loading": false,
                "fsdp_sync_module_states": false,
                "fsdp_activation_checkpointing": false
            })
        );
        // FSDP1: no parallelism config, and no Megatron-LM once FSDP is chosen.
        assert!(!s
            .asked
            .iter()
            .any(|q| q.contains("parallelism config") || q.contains("Megatron")));
        assert!(!m.contains_key("gpu_ids") && !m.contains_key("parallelism_config"));
    }

    #[test]
    fn megatron_lm() {
        let (m, _) = ok(vec![
            Enter,
            Pick(4),
            Text(""),
            Text(""),
            Text(""),
            Text(""),
            Text(""),
            Text("yes"),
            Text("2"),
            Text(""),
            Text("2"),
            Text("4"),
            Text("no"),
            Text(""),
            Text("0"),
            Text("8"),
            Pick(2),
        ]);
        assert_eq!(m["distributed_type"], "MEGATRON_LM");
        assert_eq!(
            m["megatron_lm_config"],
            json!({
                "megatron_lm_tp_degree": 2,
                "megatron_lm_sequence_parallelism": true,
                "megatron_lm_pp_degree": 2,
                "megatron_lm_num_micro_batches": 4,
                "megatron_lm_recompute_activations": false,
                "megatron_lm_use_distributed_optimizer": true,
                "megatron_lm_gradient_clipping": 0.0
            })
        );
    }

    #[test]
    fn tpu_cluster() {
        let (m, s) = ok(vec![
            Enter,
            Pick(10),
            Text(""),
            Text("8"),
            Text(""),
            Text("yes"),
            Text("tpu1"),
            Text("us-central1-a"),
            Text("yes"),
            Text("yes"),
            Text("no"),
            Text("pip install x"),
            Text("yes"),
            Text("echo hi"),
            Text(""),
            Text("vm1, vm2"),
            Text(""),
        ]);
        assert!(s
            .asked
            .iter()
            .any(|q| q == "How many XLA(s) should be used for distributed training? [1]:"));
        assert_eq!(m["distributed_type"], "XLA");
        assert_eq!(m["mixed_precision"], "no");
        assert_eq!(m["num_processes"], 8);
        assert_eq!(m["tpu_use_cluster"], true);
        assert_eq!(m["tpu_use_sudo"], true);
        assert_eq!(m["tpu_name"], "tpu1");
        assert_eq!(m["tpu_zone"], "us-central1-a");
        assert_eq!(m["commands"], json!(["pip install x", "echo hi"]));
        assert_eq!(m["tpu_vm"], json!(["vm1", "vm2"]));
        assert_eq!(m["tpu_env"], json!([]));
        assert_eq!(m["main_training_function"], "main");
    }

    #[test]
    fn tpu_command_file_is_made_absolute() {
        let (m, _) = ok(vec![
            Enter,
            Pick(10),
            Text(""),
            Text(""),
            Text("train"),
            Text("yes"),
            Text("t"),
            Text("z"),
            Text(""),
            Text("yes"),
            Text("yes"),
            Text("../setup.sh"),
            Text(""),
            Text("A=1,B=2"),
        ]);
        assert_eq!(m["command_file"], "/work/setup.sh");
        assert_eq!(m["main_training_function"], "train");
        assert_eq!(m["tpu_env"], json!(["A=1", "B=2"]));
    }

    #[test]
    fn fp8_transformer_engine_uses_the_names_the_launcher_reads() {
        let (m, s) = ok(vec![
            Enter,
            Enter,
            Text(""),
            Text("yes"),
            Enter,
            Text(""),
            Text(""),
            Text("0"),
            Text(""),
            Pick(3),
            Pick(1),
            Text(""),
            Text(""),
            Text(""),
            Pick(1),
            Text(""),
            Pick(1),
            Text("yes"),
            Text("yes"),
            Text(""),
            Text("yes"),
        ]);
        assert_eq!(m["dynamo_config"], json!({"dynamo_backend": "INDUCTOR"}));
        assert_eq!(m["gpu_ids"], "0");
        assert_eq!(
            m["fp8_config"],
            json!({
                "backend": "TE",
                "use_autocast_during_eval": false,
                "margin": 0,
                "interval": 1,
                "fp8_format": "E4M3",
                "amax_history_len": 1024,
                "amax_compute_algo": "most_recent",
                "override_linear_precision": [true, false, true]
            })
        );
        // fp8 is mixed precision: no TF32 note.
        assert!(s.said.is_empty(), "{:?}", s.said);
    }

    #[test]
    fn fp8_msamp_and_ao() {
        let base = || vec![Enter, Enter, Text("yes"), Text(""), Text(""), Pick(3)];
        let (m, _) = ok([base(), vec![Pick(2), Enter]].concat());
        assert_eq!(
            m["fp8_config"],
            json!({"backend": "MSAMP", "opt_level": "O2"})
        );
        let (m, _) = ok([base(), vec![Enter, Text(""), Text("no")]].concat());
        assert_eq!(
            m["fp8_config"],
            json!({"backend": "AO", "enable_fsdp_float8_all_gather": true, "pad_inner_dim": false})
        );
    }

    #[test]
    fn dynamo_without_mixed_precision_notes_tf32() {
        let (m, s) = ok(vec![
            Enter,
            Enter,
            Text(""),
            Text("yes"),
            Pick(11),
            Text(""),
            Text(""),
            Text(""),
            Text(""),
            Enter,
        ]);
        // accelerate's menu entry `torhchxla_trace_once` would crash; accel stores the valid name.
        assert_eq!(
            m["dynamo_config"],
            json!({"dynamo_backend": "TORCHXLA_TRACE_ONCE"})
        );
        assert_eq!(s.said.len(), 1);
        assert!(s.said[0].contains("TF32"));
    }

    #[test]
    fn deepspeed_multinode_with_a_json_config() {
        let (m, s) = ok(vec![
            Enter,
            Pick(4),
            Text("2"),
            Enter,
            Text(""),
            Text("h0"),
            Text("port"),
            Text("70000"),
            Text("29500"),
            Text("no"),
            Text("foo"),
            Text("c10d"),
            Text(""),
            Text(""),
            Text("yes"),
            Text("yes"),
            Text("/cfg/ds.json"),
            Text(""),
            Text("yes"),
            Text("MixtralSparseMoeBlock"),
            Enter,
            Text("/etc/hostfile"),
            Text("yes"),
            Text("node1"),
            Text(""),
            Text("16"),
        ]);
        assert_eq!(m["distributed_type"], "DEEPSPEED");
        assert_eq!(m["machine_rank"], 0);
        assert_eq!(m["main_process_ip"], "h0");
        assert_eq!(m["main_process_port"], 29500);
        assert_eq!(m["same_network"], false);
        assert_eq!(m["rdzv_backend"], "c10d");
        assert_eq!(m["num_processes"], 16);
        // The DeepSpeed JSON decides the precision: no key, as accelerate writes none.
        assert!(!m.contains_key("mixed_precision"));
        assert_eq!(
            m["deepspeed_config"],
            json!({
                "deepspeed_config_file": "/cfg/ds.json",
                "zero3_init_flag": false,
                "deepspeed_moe_layer_cls_names": "MixtralSparseMoeBlock",
                "deepspeed_multinode_launcher": "pdsh",
                "deepspeed_hostfile": "/etc/hostfile",
                "deepspeed_exclusion_filter": "node1"
            })
        );
        assert_eq!(
            s.said,
            [
                "Please enter a value.",
                "Please enter an integer.",
                "Please enter an integer from 0 to 65535.",
                "Please enter one of: static, c10d, etcd, etcd-v2."
            ]
        );
    }

    #[test]
    fn rank_of_a_large_job_is_typed() {
        let (m, s) = ok(vec![
            Enter,
            Pick(1),
            Text("1000"),
            Text("1000"),
            Text("999"),
            Text("h0"),
            Text("0"),
            Text(""),
            Text(""),
            Text(""),
            Text(""),
            Text("8000"),
            Enter,
        ]);
        assert_eq!(m["machine_rank"], 999);
        assert_eq!(m["num_processes"], 8000);
        assert_eq!(s.said, ["Please enter an integer from 0 to 999."]);
    }

    #[test]
    fn neuron_refuses_deepspeed_and_fsdp() {
        let (r, _) = run(vec![
            Enter,
            Pick(9),
            Text(""),
            Text(""),
            Text(""),
            Text("yes"),
        ]);
        assert!(matches!(r, Err(QuestionnaireError::Unsupported(m)) if m.contains("DeepSpeed")));
        let (r, _) = run(vec![
            Enter,
            Pick(9),
            Text(""),
            Text(""),
            Text(""),
            Text(""),
            Text("yes"),
        ]);
        assert!(matches!(r, Err(QuestionnaireError::Unsupported(m)) if m.contains("FSDP")));
    }

    #[test]
    fn sagemaker_is_refused_before_any_other_question() {
        let (r, s) = run(vec![Pick(1)]);
        assert!(matches!(r, Err(QuestionnaireError::SageMaker)));
        assert_eq!(s.asked.len(), 1);
    }

    #[test]
    fn device_word_follows_the_machine_type() {
        let (m, s) = ok(vec![
            Enter,
            Pick(5),
            Text(""),
            Text(""),
            Text(""),
            Text(""),
            Text(""),
            Text("4"),
            Text(""),
            Enter,
        ]);
        assert_eq!(m["distributed_type"], "MULTI_NPU");
        assert_eq!(m["gpu_ids"], "all");
        assert!(s.asked.iter().any(|q| q.starts_with("How many NPU(s)")));
        assert!(s.asked.iter().any(|q| q.starts_with("What NPU(s) (by id)")));
        // numa efficiency is asked for NO and MULTI_GPU only.
        assert!(!s.asked.iter().any(|q| q.contains("numa")));
    }

    #[test]
    fn process_and_device_words_follow_the_type() {
        assert_eq!(processes_word("MULTI_GPU"), "GPU(s)");
        assert_eq!(processes_word("MULTI_CPU"), "processes");
        assert_eq!(processes_word("MULTI_NEURON"), "NEURON cores");
        assert_eq!(processes_word("XLA"), "XLA(s)");
        assert_eq!(device_word("MULTI_GPU"), "GPU(s)");
        assert_eq!(device_word("NO"), "GPU(s)");
        assert_eq!(device_word("MULTI_XPU"), "XPU(s)");
        assert_eq!(device_word("MULTI_NEURON"), "Neuron cores");
    }

    #[test]
    fn rendezvous_backends_are_the_schemas() {
        assert_eq!(rdzv_backend_check("c10d"), Ok(()));
        assert_eq!(
            rdzv_backend_check("zmq"),
            Err("Please enter one of: static, c10d, etcd, etcd-v2.".to_string())
        );
    }

    #[test]
    fn into_dict_leaves_out_none_and_empty_sections_in_accelerates_order() {
        let mut fsdp_config = Map::new();
        set(&mut fsdp_config, "fsdp_version", 2);
        let m = Answers {
            distributed_type: "FSDP",
            num_processes: 8,
            gpu_ids: None,
            mixed_precision: None,
            machines: Machines::default(),
            main_training_function: "main".into(),
            sections: Sections {
                fsdp_config,
                ..Sections::default()
            },
            use_cpu: false,
            tpu: Tpu::default(),
            enable_cpu_affinity: true,
        }
        .into_dict();
        let keys: Vec<&str> = m.keys().map(String::as_str).collect();
        assert_eq!(
            keys,
            [
                "compute_environment",
                "distributed_type",
                "num_processes",
                "downcast_bf16",
                "machine_rank",
                "num_machines",
                "main_training_function",
                "fsdp_config",
                "use_cpu",
                "rdzv_backend",
                "same_network",
                "tpu_env",
                "tpu_use_sudo",
                "tpu_use_cluster",
                "debug",
                "enable_cpu_affinity",
            ]
        );
        assert_eq!(m["tpu_env"], json!([]));
        assert_eq!(m["same_network"], true);
        assert_eq!(m["rdzv_backend"], "static");
        assert_eq!(m["fsdp_config"], json!({"fsdp_version": 2}));
    }

    #[test]
    fn paths_like_python() {
        let c = ctx();
        assert_eq!(expand_user("~/hostfile", &c), "/home/u/hostfile");
        assert_eq!(expand_user("~", &c), "/home/u");
        assert_eq!(expand_user("/etc/hosts", &c), "/etc/hosts");
        assert_eq!(expand_user("~root/h", &c), "/root/h");
        assert_eq!(abspath("a/./b/../c.sh", &c), "/work/run/a/c.sh");
        assert_eq!(abspath("/x/../y", &c), "/y");
    }
}
