//! Runs `accel-estimate-memory`: load the model description, print accelerate's table, then the
//! per-GPU estimate when one was asked for.

use serde_json::{json, Value};

use crate::cli::estimate::EstimateCli;
use crate::devices;
use crate::env_vars::Environment;
use crate::error::Result;
use crate::estimate::arch::{self, Dims};
use crate::estimate::error::EstimateError;
use crate::estimate::input::{self, Model};
use crate::estimate::per_gpu::{self, Breakdown, Training};
use crate::estimate::quant;
use crate::estimate::table::{self, convert_bytes};
use crate::estimate::tensors::{maximum_sizes, Bytes, MaximumSizes};
use crate::exit_status::ExitStatus;

pub fn run(cli: EstimateCli, env: &Environment) -> Result<ExitStatus> {
    let plan = Plan::of(&cli)?;
    let model = input::load(&cli.model_name, cli.from, &cli.revision, env)?;
    let sizes = maximum_sizes(&model.tensors, &model.no_split);
    let per_gpu = match plan {
        Plan::None => None,
        plan => Some(per_gpu_estimate(&cli, &model, &sizes, plan, env)?),
    };
    let fits = per_gpu.as_ref().and_then(|p| p.fits);
    if cli.json {
        let mut text =
            serde_json::to_string_pretty(&to_json(&cli, &model, &sizes, per_gpu.as_ref()))
                .unwrap_or_default();
        text.push('\n');
        crate::tools::print(&text)?;
    } else {
        let mut text = table::render(&cli.model_name, &sizes, &cli.dtypes);
        text.push('\n');
        if let Some(p) = &per_gpu {
            text.push('\n');
            text.push_str(&p.render());
        }
        crate::tools::print(&text)?;
    }
    Ok(if fits == Some(false) {
        ExitStatus::Failure
    } else {
        ExitStatus::Success
    })
}

#[derive(Debug, Clone, Copy, PartialEq)]
enum Plan {
    None,
    Training,
    Inference,
}

impl Plan {
    fn of(cli: &EstimateCli) -> Result<Plan, EstimateError> {
        let training = cli.strategy.is_some()
            || cli.offload
            || cli.seq_len.is_some()
            || cli.grad_checkpointing
            || cli.attn_implementation.is_some();
        if cli.context.is_some() {
            if training {
                return Err(EstimateError::Usage(
                    "--context estimates inference; --strategy, --offload, --seq-len, --grad-checkpointing and --attn-implementation are for training: give one or the other".into(),
                ));
            }
            return Ok(Plan::Inference);
        }
        if cli.offload && matches!(cli.strategy, None | Some(per_gpu::Strategy::Ddp)) {
            return Err(EstimateError::Usage(
                "--offload needs a sharded --strategy (zero1, zero2, zero3 or fsdp)".into(),
            ));
        }
        if training
            || cli.num_gpus.is_some()
            || cli.gpu_memory.is_some()
            || cli.batch_size.is_some()
        {
            return Ok(Plan::Training);
        }
        Ok(Plan::None)
    }
}

struct PerGpu {
    plan: Plan,
    title: String,
    breakdown: Breakdown,
    setup: Value,
    gpu_memory: Option<u64>,
    fits: Option<bool>,
    /// (what, value) — the largest batch or context that fits.
    largest: Option<(&'static str, u64)>,
    /// Per-rank weights, gradients, optimizer state and master weights where ranks differ.
    ranks: Vec<Value>,
}

fn dims_or_error<'m>(
    model: &'m Model,
    cli: &EstimateCli,
    what: &str,
) -> Result<&'m Dims, EstimateError> {
    model
        .dims
        .as_ref()
        .ok_or_else(|| EstimateError::NeedsConfig {
            what: what.into(),
            source_name: cli.model_name.clone(),
            reason: model
                .no_dims_reason
                .clone()
                .unwrap_or_else(|| "has no config.json".into()),
        })
}

fn per_gpu_estimate(
    cli: &EstimateCli,
    model: &Model,
    sizes: &MaximumSizes,
    plan: Plan,
    env: &Environment,
) -> Result<PerGpu> {
    let (gpu_memory, num_gpus) = gpus(cli, env)?;
    let mut out = match plan {
        Plan::Inference => inference_estimate(cli, model, gpu_memory, num_gpus)?,
        _ => training_estimate(cli, model, sizes, gpu_memory, num_gpus)?,
    };
    out.fits = out
        .gpu_memory
        .map(|m| out.breakdown.gpu_total() <= m as f64);
    Ok(out)
}

/// Each GPU's memory and how many GPUs: --gpu-memory and --num-gpus, else what this machine has.
fn gpus(cli: &EstimateCli, env: &Environment) -> Result<(Option<u64>, u64), EstimateError> {
    let gpu_memory = match &cli.gpu_memory {
        Some(text) => Some(per_gpu::parse_size(text).map_err(EstimateError::Usage)?),
        None => None,
    };
    let (gpu_memory, detected_gpus) = if gpu_memory.is_none() || cli.num_gpus.is_none() {
        // The GPUs a run started here could use: CUDA_VISIBLE_DEVICES narrows them, as for accel-launch.
        let gpus = devices::detect_gpus(env).gpus;
        let memory =
            gpu_memory.or_else(|| gpus.first().and_then(|g| g.memory_mib).map(|mib| mib << 20));
        (memory, u64::from(devices::visible_of(env, &gpus)))
    } else {
        (gpu_memory, 0)
    };
    Ok((gpu_memory, cli.num_gpus.unwrap_or(detected_gpus.max(1))))
}

/// --context: the weights and the KV cache, and the longest context that fits.
fn inference_estimate(
    cli: &EstimateCli,
    model: &Model,
    gpu_memory: Option<u64>,
    num_gpus: u64,
) -> Result<PerGpu, EstimateError> {
    let context = cli.context.unwrap_or(1);
    let dims = dims_or_error(model, cli, "the KV cache (--context)")?;
    let batch = cli.batch_size.unwrap_or(1);
    let weights = inference_weights(model, cli.dtype);
    let kv = per_gpu::kv_cache(dims, context, batch, cli.kv_dtype);
    let breakdown = per_gpu::inference(weights, kv, num_gpus);
    let largest = gpu_memory.map(|m| {
        let per_token = per_gpu::kv_cache(dims, 1, batch, cli.kv_dtype) / num_gpus as f64;
        (
            "context",
            per_gpu::largest_fitting(m as f64, breakdown.weights, per_token),
        )
    });
    Ok(PerGpu {
        plan: Plan::Inference,
        title: format!(
            "Inference: {num_gpus} GPU{}, {} weights, {} KV cache, {batch} x {context} tokens",
            plural(num_gpus),
            name(&cli.dtype),
            name(&cli.kv_dtype)
        ),
        breakdown,
        setup: json!({
            "num_gpus": num_gpus, "context": context, "batch_size": batch,
            "dtype": cli.dtype, "kv_dtype": cli.kv_dtype,
        }),
        gpu_memory,
        fits: None,
        largest,
        ranks: Vec::new(),
    })
}

/// Training: weights, gradients, optimizer state and buffers of the strategy, the activations when
/// --seq-len is given, each rank where ranks differ, and the largest micro-batch that fits.
fn training_estimate(
    cli: &EstimateCli,
    model: &Model,
    sizes: &MaximumSizes,
    gpu_memory: Option<u64>,
    num_gpus: u64,
) -> Result<PerGpu, EstimateError> {
    let strategy = cli.strategy.unwrap_or(per_gpu::Strategy::Ddp);
    let dims = activation_dims(cli, model)?;
    let dims = dims.as_ref();
    let training = Training {
        strategy,
        num_gpus,
        offload: cli.offload,
        precision: cli.precision,
        batch_size: cli.seq_len.map(|_| cli.batch_size.unwrap_or(1)),
        seq_len: cli.seq_len,
        grad_checkpointing: cli.grad_checkpointing,
    };
    let trained = trained_tensors(model);
    let params: u64 = trained.iter().map(|p| p.numel).sum();
    let largest_params = (sizes.largest_layer.value / 4.0) as u64;
    let breakdown = per_gpu::training(&trained, largest_params, dims, &training);
    let ranks = rank_breakdowns(&trained, largest_params, dims, &training);
    let largest = match (gpu_memory, dims, training.seq_len) {
        (Some(m), Some(d), Some(s)) => {
            // Activations are c + b.u: a part per sample and one per micro-batch (T5's
            // position-bias indices, one layer recomputed under checkpointing).
            let act = |b| per_gpu::activations(d, b, s, cli.grad_checkpointing, cli.precision);
            let per_sample = act(2) - act(1);
            let fixed = breakdown.gpu_total() - breakdown.activations + act(1) - per_sample;
            Some((
                "batch_size",
                per_gpu::largest_fitting(m as f64, fixed, per_sample),
            ))
        }
        _ => None,
    };
    Ok(PerGpu {
        plan: Plan::Training,
        title: training_title(&training, dims),
        breakdown,
        setup: json!({
            "strategy": strategy, "num_gpus": num_gpus, "offload": cli.offload,
            "precision": cli.precision, "batch_size": training.batch_size,
            "attn_implementation": dims.map(|d| d.attn_implementation),
            "seq_len": training.seq_len, "grad_checkpointing": cli.grad_checkpointing,
            "parameters": params, "parameter_tensors": trained.len(),
            "largest_layer_parameters": largest_params,
        }),
        ranks,
        gpu_memory,
        fits: None,
        largest,
    })
}

/// The model's dimensions for activation memory (--seq-len, with --batch-size), with the attention
/// of --attn-implementation; `None` when activations are not estimated.
fn activation_dims(cli: &EstimateCli, model: &Model) -> Result<Option<Dims>, EstimateError> {
    if cli.attn_implementation.is_some() && cli.seq_len.is_none() {
        return Err(EstimateError::Usage(
            "--attn-implementation changes activation memory, which needs --seq-len (and --batch-size)".into(),
        ));
    }
    if cli.seq_len.is_none() && cli.batch_size.is_none() {
        return Ok(None);
    }
    if cli.seq_len.is_none() {
        return Err(EstimateError::Usage(
            "activation memory needs --seq-len as well as --batch-size".into(),
        ));
    }
    let mut dims = dims_or_error(model, cli, "activation memory (--seq-len)")?.clone();
    if let Some(attention) = cli.attn_implementation {
        arch::check_supported(attention, &dims.model_type)
            .map_err(|reason| EstimateError::Usage(format!("--attn-implementation: {reason}")))?;
        dims.attn_implementation = attention;
    }
    Ok(Some(dims))
}

/// FSDP2's uneven shards and ZeRO-2's partition edges make ranks differ; small worlds list every
/// rank.
fn rank_breakdowns(
    trained: &[per_gpu::Param],
    largest_params: u64,
    dims: Option<&Dims>,
    training: &Training,
) -> Vec<Value> {
    if training.strategy == per_gpu::Strategy::Ddp || training.num_gpus > 64 {
        return Vec::new();
    }
    (0..training.num_gpus)
        .map(|r| {
            let b = per_gpu::training_on_rank(trained, largest_params, dims, training, r);
            json!({
                "rank": r, "weights": b.weights.ceil(), "gradients": b.gradients.ceil(),
                "optimizer_states": b.optimizer_states.ceil(),
                "master_weights": b.master_weights.ceil(),
            })
        })
        .collect()
}

/// The training table's title: the strategy, the GPUs, the precision, then what was asked of the
/// activations.
fn training_title(training: &Training, dims: Option<&Dims>) -> String {
    let mut title = format!(
        "Training: {} on {} GPU{}, {}",
        training.strategy.name(),
        training.num_gpus,
        plural(training.num_gpus),
        name(&training.precision)
    );
    if training.offload {
        title.push_str(", CPU offload");
    }
    if let (Some(b), Some(s)) = (training.batch_size, training.seq_len) {
        title.push_str(&format!(", {b} x {s} tokens"));
        if let Some(d) = dims {
            title.push_str(&format!(", {} attention", d.attn_implementation.name()));
        }
        if training.grad_checkpointing {
            title.push_str(", checkpointing");
        }
    }
    title
}

/// Inference weight bytes of the causal LM (its untied LM head included): floating-point tensors at `dtype`, integer tensors (GPTQ/AWQ packed
/// I32, int8 weights) at their stored size, and, for a config with `quantization_config`, the
/// decoder layers' linear weights as the quantizer stores them.
fn inference_weights(model: &Model, dtype: per_gpu::StoreDtype) -> f64 {
    let scheme = model.quantization.as_ref().and_then(quant::Scheme::of);
    model
        .trained_model()
        .map(|t| {
            if let Some(s) = &scheme {
                if let Some(bytes) = s.bytes(t) {
                    return bytes;
                }
            }
            if t.dtype.is_float() {
                t.numel as f64 * dtype.bytes()
            } else {
                t.numel as f64 * t.dtype.bits() as f64 / 8.0
            }
        })
        .sum()
}

fn plural(n: u64) -> &'static str {
    if n == 1 {
        ""
    } else {
        "s"
    }
}

fn name<T: serde::Serialize>(v: &T) -> String {
    serde_json::to_value(v)
        .ok()
        .and_then(|v| v.as_str().map(str::to_string))
        .unwrap_or_default()
}

/// Parameter tensors that are trained: floating-point tensors that are not buffers, of the model
/// that is trained — the causal LM, so with its LM head when untied.
fn trained_tensors(model: &Model) -> Vec<per_gpu::Param> {
    model
        .trained_model()
        .filter(|t| !t.buffer && t.dtype.is_float())
        .map(|t| per_gpu::Param {
            numel: t.numel,
            rows: t.rows,
            matmul: t.matmul,
        })
        .collect()
}

fn trained_parameters(model: &Model) -> u64 {
    trained_tensors(model).iter().map(|p| p.numel).sum()
}

fn human(bytes: f64) -> String {
    convert_bytes(Bytes {
        value: bytes.ceil(),
        is_float: true,
    })
}

impl PerGpu {
    fn components(&self) -> Vec<(&'static str, f64)> {
        let b = &self.breakdown;
        let all = [
            ("Weights", b.weights),
            ("Gradients", b.gradients),
            ("Optimizer states (Adam)", b.optimizer_states),
            ("Master weights (fp32)", b.master_weights),
            ("All-gather buffer", b.gather_buffer),
            ("Reduce bucket (DeepSpeed)", b.reduce_bucket),
            ("Autocast weight copies", b.autocast_cache),
            ("Activations", b.activations),
            ("KV cache", b.kv_cache),
        ];
        all.into_iter()
            .filter(|(n, v)| *v > 0.0 || (*n == "Weights"))
            .collect()
    }

    fn render(&self) -> String {
        let mut rows: Vec<Vec<String>> = self
            .components()
            .into_iter()
            .map(|(n, v)| vec![n.to_string(), human(v)])
            .collect();
        rows.push(vec![
            "Total on each GPU".into(),
            human(self.breakdown.gpu_total()),
        ]);
        if self.breakdown.cpu_offloaded > 0.0 {
            rows.push(vec![
                "Offloaded to CPU (per GPU)".into(),
                human(self.breakdown.cpu_offloaded),
            ]);
        }
        let mut text = table::box_table(&["Component", "Per GPU"], &rows, &self.title);
        match (self.gpu_memory, self.fits) {
            (Some(m), Some(fits)) => {
                let verdict = if fits { "fits" } else { "does NOT fit" };
                text.push_str(&format!(
                    "GPU memory {}: {verdict} ({} needed per GPU)\n",
                    human(m as f64),
                    human(self.breakdown.gpu_total())
                ));
            }
            _ => text.push_str("GPU memory unknown: pass --gpu-memory SIZE for a verdict\n"),
        }
        if let Some((what, value)) = self.largest {
            let what = if what == "context" {
                "Longest context that fits (tokens)"
            } else {
                "Largest micro-batch per GPU that fits"
            };
            text.push_str(&format!("{what}: {value}\n"));
        }
        text
    }

    fn to_json(&self) -> Value {
        let b = &self.breakdown;
        let mut v = json!({
            "mode": if self.plan == Plan::Inference { "inference" } else { "training" },
            "setup": self.setup,
            "bytes": {
                "weights": b.weights.ceil(), "gradients": b.gradients.ceil(),
                "optimizer_states": b.optimizer_states.ceil(), "master_weights": b.master_weights.ceil(),
                "gather_buffer": b.gather_buffer.ceil(), "reduce_bucket": b.reduce_bucket.ceil(),
                "autocast_cache": b.autocast_cache.ceil(),
                "activations": b.activations.ceil(),
                "kv_cache": b.kv_cache.ceil(), "gpu_total": b.gpu_total().ceil(),
                "cpu_offloaded": b.cpu_offloaded.ceil(),
            },
            "gpu_memory": self.gpu_memory,
            "fits": self.fits,
        });
        if !self.ranks.is_empty() {
            v["ranks"] = json!(self.ranks);
        }
        if let Some((what, value)) = self.largest {
            v[if what == "context" {
                "largest_context"
            } else {
                "largest_batch_size"
            }] = json!(value);
        }
        v
    }
}

fn number(b: Bytes) -> Value {
    if !b.is_float && b.value.fract() == 0.0 {
        json!(b.value as u64)
    } else {
        json!(b.value)
    }
}

fn to_json(
    cli: &EstimateCli,
    model: &Model,
    sizes: &MaximumSizes,
    per_gpu: Option<&PerGpu>,
) -> Value {
    let numbers = table::rows(sizes, &cli.dtypes);
    let rows: Vec<Value> = numbers
        .iter()
        .zip(table::cells(&numbers))
        .map(|(r, cells)| {
            json!({
                "dtype": r.dtype,
                "largest_layer": number(r.largest_layer),
                "total_size": number(r.total),
                "training_using_adam": r.training_adam.map(number),
                "text": {"largest_layer": cells[1], "total_size": cells[2], "training_using_adam": cells[3]},
            })
        })
        .collect();
    let mut v = json!({
        "model": cli.model_name,
        "source": model.source,
        // `parameters` and `tensors` describe the model `total_size` sizes (accelerate's);
        // `trained_parameters` the model per-GPU training counts (P in FORMULAS).
        "parameters": model.tensors.iter().filter(|t| !t.buffer).map(|t| t.numel).sum::<u64>(),
        "trained_parameters": trained_parameters(model),
        "tensors": model.tensors.len(),
        "total_size": number(sizes.total),
        "largest_layer": number(sizes.largest_layer),
        "dims": model.dims,
        "dtypes": rows,
    });
    if let Some((requests, bytes)) = model.hub_traffic {
        v["hub"] = json!({"requests": requests, "bytes_received": bytes});
    }
    if let Some(p) = per_gpu {
        v["per_gpu"] = p.to_json();
    }
    v
}

#[cfg(test)]
mod tests {
    use super::*;
    use per_gpu::{Precision, Strategy};

    fn training(strategy: Strategy, num_gpus: u64) -> Training {
        Training {
            strategy,
            num_gpus,
            offload: false,
            precision: Precision::Bf16,
            batch_size: None,
            seq_len: None,
            grad_checkpointing: false,
        }
    }

    #[test]
    fn the_training_title_says_what_was_asked() {
        assert_eq!(
            training_title(&training(Strategy::Ddp, 1), None),
            "Training: ddp on 1 GPU, bf16"
        );
        let t = Training {
            offload: true,
            batch_size: Some(2),
            seq_len: Some(512),
            grad_checkpointing: true,
            precision: Precision::Fp32,
            ..training(Strategy::Zero3, 8)
        };
        assert_eq!(
            training_title(&t, None),
            "Training: zero3 on 8 GPUs, fp32, CPU offload, 2 x 512 tokens, checkpointing"
        );
        // Checkpointing is said only with the activations it changes.
        let t = Training {
            grad_checkpointing: true,
            ..training(Strategy::Fsdp, 2)
        };
        assert_eq!(training_title(&t, None), "Training: fsdp on 2 GPUs, bf16");
    }

    #[test]
    fn ranks_are_listed_for_sharded_strategies_on_small_worlds() {
        let params = [per_gpu::Param {
            numel: 1000,
            rows: 10,
            matmul: true,
        }];
        assert!(rank_breakdowns(&params, 1000, None, &training(Strategy::Ddp, 4)).is_empty());
        assert!(rank_breakdowns(&params, 1000, None, &training(Strategy::Zero2, 65)).is_empty());
        let ranks = rank_breakdowns(&params, 1000, None, &training(Strategy::Zero2, 64));
        assert_eq!(ranks.len(), 64);
        assert_eq!(ranks[63]["rank"], 63);
    }
}
