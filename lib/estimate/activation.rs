//! transformers' activation functions by the names a config.json gives them
//! (`transformers/activations.py::ACT2CLS`, looked up through `ACT2FN` when a model is built): a name
//! it lacks makes the modelling code raise (`KeyError`), so it is refused here; the few learnable
//! ones add parameters to every module that uses them, so they are sized.

/// What building an activation adds to the model.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Activation {
    /// No tensors (GELU, SiLU, ReLU...).
    Plain,
    /// `nn.PReLU()`: one float32 weight.
    PReLU,
    /// `XIELUActivation`: two bfloat16 parameters (`alpha_p`, `alpha_n`) and two bfloat16 scalar
    /// buffers (`beta`, `eps`).
    XIeLU,
}

/// The keys of `ACT2CLS`, in its order.
pub const NAMES: &[&str] = &[
    "gelu",
    "gelu_10",
    "gelu_fast",
    "gelu_new",
    "gelu_python",
    "gelu_pytorch_tanh",
    "gelu_python_tanh",
    "gelu_accurate",
    "hardswish",
    "laplace",
    "leaky_relu",
    "linear",
    "mish",
    "quick_gelu",
    "relu",
    "relu2",
    "relu6",
    "sigmoid",
    "silu",
    "sqrtsoftplus",
    "swish",
    "tanh",
    "prelu",
    "xielu",
];

impl Activation {
    /// The activation `ACT2FN[name]` builds, or None where it raises.
    pub fn parse(name: &str) -> Option<Activation> {
        match name {
            "prelu" => Some(Activation::PReLU),
            "xielu" => Some(Activation::XIeLU),
            _ if NAMES.contains(&name) => Some(Activation::Plain),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_name_of_act2cls_parses_and_others_do_not() {
        assert!(NAMES.iter().all(|n| Activation::parse(n).is_some()));
        assert_eq!(Activation::parse("prelu"), Some(Activation::PReLU));
        assert_eq!(Activation::parse("xielu"), Some(Activation::XIeLU));
        assert_eq!(Activation::parse("silu"), Some(Activation::Plain));
        // Names are case-sensitive, and T5's `gated-` prefix is not part of one.
        for bad in ["nope", "SiLU", "gated-gelu", ""] {
            assert_eq!(Activation::parse(bad), None, "{bad}");
        }
    }
}
