//! A safe pickle reader: it runs the pickle opcode stream into an arena of plain values and never imports
//! or calls anything. Checkpoints are untrusted input, and Python's own unpickler executes whatever a file
//! names; here a `GLOBAL` only becomes a tag, `REDUCE`/`NEWOBJ`/`BUILD` only record what they would have
//! called, and which globals may appear at all is decided by a [`Globals`] policy per file kind.
//!
//! Values live in an arena and refer to each other by index, exactly like Python objects shared through
//! the memo: a dict memoized before its `SETITEMS` is the same dict when fetched later. Nothing is ever
//! expanded, so a small file can never describe a large allocation.

use std::collections::HashMap;

/// An index into [`Pickle::nodes`].
pub type Id = u32;

/// One unpickled value.
#[derive(Debug, Clone, PartialEq)]
pub enum Node {
    None,
    Bool(bool),
    Int(i64),
    Float(f64),
    Str(String),
    Bytes(Vec<u8>),
    List(Vec<Id>),
    Tuple(Vec<Id>),
    Dict(Vec<(Id, Id)>),
    /// A `GLOBAL`/`STACK_GLOBAL` reference, allowed by the policy.
    Global(String, String),
    /// What `REDUCE` (`f(*args)`) or `NEWOBJ` (`cls.__new__(cls, *args)`) would have built, with the
    /// `BUILD` state and any `SETITEMS`/`APPENDS` applied to it afterwards.
    Object {
        callable: Id,
        args: Id,
        state: Option<Id>,
        items: Vec<(Id, Id)>,
        appends: Vec<Id>,
    },
    /// A `BINPERSID` reference (torch.save storages).
    Persistent(Id),
}

/// Which `GLOBAL`s a file may name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Globals {
    /// DCP `.metadata`: the metadata dataclasses, `torch.Size`, dtypes, layout, `pathlib` paths.
    DcpMetadata,
    /// A torch.save archive of tensors: rebuild functions, storage classes, dtypes, `OrderedDict`, and
    /// the rest of torch's `weights_only` allowlist.
    TorchWeights,
    /// Anything, as opaque tags (DeepSpeed files pickle their own classes). Still nothing is executed.
    Any,
    /// No global at all: plain dicts, lists, strings and numbers (torch's Flight Recorder dumps).
    Plain,
    /// A rank's FSDP2 state dict file: [`Globals::TorchWeights`] plus the classes a DTensor pickles
    /// (its spec, mesh and placements), read as data like every other object.
    FsdpShards,
}

#[derive(Debug, thiserror::Error, PartialEq)]
pub enum PickleError {
    #[error("the pickle ends early at byte {0}")]
    Truncated(usize),
    #[error("unsupported pickle opcode 0x{op:02x} at byte {pos}")]
    Opcode { op: u8, pos: usize },
    #[error("the pickle names `{module}.{name}`, which a {kind} file never contains")]
    Global {
        module: String,
        name: String,
        kind: &'static str,
    },
    #[error("malformed pickle at byte {pos}: {what}")]
    Malformed { pos: usize, what: &'static str },
}

/// A whole unpickled file: the arena and the value `STOP` returned.
#[derive(Debug)]
pub struct Pickle {
    pub nodes: Vec<Node>,
    pub root: Id,
}

const DCP_MODULE: &str = "torch.distributed.checkpoint.metadata";

/// Dtype names torch pickles as bare `torch.<name>` globals.
pub const TORCH_DTYPES: &[&str] = &[
    "float64",
    "float32",
    "float16",
    "bfloat16",
    "int64",
    "int32",
    "int16",
    "int8",
    "uint8",
    "bool",
    "uint16",
    "uint32",
    "uint64",
    "complex64",
    "complex128",
    "complex32",
    "float8_e4m3fn",
    "float8_e5m2",
    "float8_e4m3fnuz",
    "float8_e5m2fnuz",
    "float8_e8m0fnu",
    "float4_e2m1fn_x2",
    "double",
    "float",
    "half",
    "long",
    "int",
    "short",
    "cfloat",
    "cdouble",
    "qint8",
    "quint8",
    "qint32",
    "quint4x2",
    "quint2x4",
    "bits8",
    "bits16",
];

fn allowed(policy: Globals, module: &str, name: &str) -> bool {
    match policy {
        Globals::Any => true,
        Globals::Plain => false,
        Globals::DcpMetadata => match module {
            DCP_MODULE => matches!(
                name,
                "Metadata"
                    | "TensorStorageMetadata"
                    | "ChunkStorageMetadata"
                    | "BytesStorageMetadata"
                    | "TensorProperties"
                    | "_MEM_FORMAT_ENCODING"
                    | "MetadataIndex"
                    | "StorageMeta"
            ),
            "torch.distributed.checkpoint.filesystem" => name == "_StorageInfo",
            "torch" => name == "Size" || TORCH_DTYPES.contains(&name),
            "torch.serialization" => name == "_get_layout",
            "pathlib" | "pathlib._local" => {
                matches!(
                    name,
                    "PosixPath" | "WindowsPath" | "PurePosixPath" | "PureWindowsPath"
                )
            }
            _ => false,
        },
        Globals::FsdpShards => {
            allowed(Globals::TorchWeights, module, name)
                || (module, name) == ("torch._utils", "_rebuild_wrapper_subclass")
                || matches!(
                    (module, name),
                    ("torch.distributed.tensor", "DTensor")
                        | ("torch.distributed.tensor._dtensor_spec", "DTensorSpec")
                        | ("torch.distributed.tensor._dtensor_spec", "TensorMeta")
                        | ("torch.distributed.tensor._dtensor_spec", "ShardOrderEntry")
                        | ("torch.distributed.device_mesh", "DeviceMesh")
                        | ("torch.distributed._mesh_layout", "_MeshLayout")
                        | ("torch.distributed._mesh_layout", "_FlatLayout")
                        | ("torch.distributed.tensor.placement_types", "Shard")
                )
        }
        Globals::TorchWeights => match module {
            "torch._utils" => matches!(
                name,
                "_rebuild_tensor_v2"
                    | "_rebuild_tensor_v3"
                    | "_rebuild_parameter"
                    | "_rebuild_parameter_with_state"
            ),
            "torch._tensor" => name == "_rebuild_from_type_v2",
            "torch" => {
                name == "Size"
                    || name == "Tensor"
                    || name == "device"
                    || name.ends_with("Storage")
                    || TORCH_DTYPES.contains(&name)
            }
            "torch.storage" => name == "UntypedStorage",
            "torch.nn.parameter" => name == "Parameter",
            "torch.serialization" => name == "_get_layout",
            "collections" => name == "OrderedDict" || name == "Counter",
            "builtins" => matches!(name, "set" | "frozenset" | "bytearray" | "complex"),
            "_codecs" => name == "encode",
            _ => false,
        },
    }
}

fn kind_name(policy: Globals) -> &'static str {
    match policy {
        Globals::DcpMetadata => "DCP .metadata",
        Globals::TorchWeights => "torch.save tensor",
        Globals::Any => "pickle",
        Globals::Plain => "Flight Recorder",
        Globals::FsdpShards => "FSDP2 rank state dict",
    }
}

struct Vm<'a> {
    data: &'a [u8],
    pos: usize,
    nodes: Vec<Node>,
    stack: Vec<Id>,
    marks: Vec<usize>,
    memo: HashMap<u32, Id>,
    policy: Globals,
}

/// Runs the pickle in `data` under `policy`.
pub fn load(data: &[u8], policy: Globals) -> Result<Pickle, PickleError> {
    let mut vm = Vm::new(data, policy);
    let root = vm.run()?;
    Ok(Pickle {
        nodes: vm.nodes,
        root,
    })
}

impl<'a> Vm<'a> {
    fn new(data: &'a [u8], policy: Globals) -> Vm<'a> {
        Vm {
            data,
            pos: 0,
            nodes: Vec::new(),
            stack: Vec::new(),
            marks: Vec::new(),
            memo: HashMap::new(),
            policy,
        }
    }
    fn take(&mut self, n: usize) -> Result<&'a [u8], PickleError> {
        let end = self
            .pos
            .checked_add(n)
            .filter(|&e| e <= self.data.len())
            .ok_or(PickleError::Truncated(self.pos))?;
        let s = &self.data[self.pos..end];
        self.pos = end;
        Ok(s)
    }
    fn u8(&mut self) -> Result<u8, PickleError> {
        Ok(self.take(1)?[0])
    }
    fn u16(&mut self) -> Result<u16, PickleError> {
        let b = self.take(2)?;
        Ok(u16::from_le_bytes([b[0], b[1]]))
    }
    fn u32(&mut self) -> Result<u32, PickleError> {
        let b = self.take(4)?;
        Ok(u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
    }
    fn u64(&mut self) -> Result<u64, PickleError> {
        let b = self.take(8)?;
        let mut a = [0u8; 8];
        a.copy_from_slice(b);
        Ok(u64::from_le_bytes(a))
    }
    fn len64(&mut self) -> Result<usize, PickleError> {
        let n = self.u64()?;
        usize::try_from(n).map_err(|_| PickleError::Truncated(self.pos))
    }
    fn line(&mut self) -> Result<&'a str, PickleError> {
        let rest = &self.data[self.pos..];
        let n = rest
            .iter()
            .position(|&b| b == b'\n')
            .ok_or(PickleError::Truncated(self.pos))?;
        let s =
            std::str::from_utf8(&rest[..n]).map_err(|_| self.bad("a line that is not UTF-8"))?;
        self.pos += n + 1;
        Ok(s)
    }
    fn bad(&self, what: &'static str) -> PickleError {
        PickleError::Malformed {
            pos: self.pos,
            what,
        }
    }
    fn push(&mut self, node: Node) -> Result<(), PickleError> {
        let id = Id::try_from(self.nodes.len()).map_err(|_| self.bad("too many values"))?;
        self.nodes.push(node);
        self.stack.push(id);
        Ok(())
    }
    fn pop(&mut self) -> Result<Id, PickleError> {
        let floor = self.marks.last().copied().unwrap_or(0);
        if self.stack.len() <= floor {
            return Err(self.bad("stack underflow"));
        }
        self.stack.pop().ok_or_else(|| self.bad("stack underflow"))
    }
    fn top(&self) -> Result<Id, PickleError> {
        let floor = self.marks.last().copied().unwrap_or(0);
        if self.stack.len() <= floor {
            return Err(self.bad("stack underflow"));
        }
        self.stack
            .last()
            .copied()
            .ok_or_else(|| self.bad("stack underflow"))
    }
    fn pop_mark(&mut self) -> Result<Vec<Id>, PickleError> {
        let mark = self.marks.pop().ok_or_else(|| self.bad("no MARK"))?;
        Ok(self.stack.split_off(mark))
    }
    fn str_node(&mut self, bytes: &[u8]) -> Result<(), PickleError> {
        let s = std::str::from_utf8(bytes).map_err(|_| self.bad("a string that is not UTF-8"))?;
        self.push(Node::Str(s.to_owned()))
    }
    fn global(&mut self, module: &str, name: &str) -> Result<(), PickleError> {
        if !allowed(self.policy, module, name) {
            return Err(PickleError::Global {
                module: module.to_owned(),
                name: name.to_owned(),
                kind: kind_name(self.policy),
            });
        }
        self.push(Node::Global(module.to_owned(), name.to_owned()))
    }
    fn memo_put(&mut self, key: u32) -> Result<(), PickleError> {
        let top = self.top()?;
        self.memo.insert(key, top);
        Ok(())
    }
    fn memo_get(&mut self, key: u32) -> Result<(), PickleError> {
        let id = *self
            .memo
            .get(&key)
            .ok_or_else(|| self.bad("memo key not set"))?;
        self.stack.push(id);
        Ok(())
    }
    fn tuple(&mut self, items: Vec<Id>) -> Result<(), PickleError> {
        self.push(Node::Tuple(items))
    }
    fn set_items(&mut self, target: Id, pairs: Vec<Id>) -> Result<(), PickleError> {
        if pairs.len() % 2 != 0 {
            return Err(self.bad("SETITEMS with an odd number of values"));
        }
        let kv: Vec<(Id, Id)> = pairs.chunks_exact(2).map(|p| (p[0], p[1])).collect();
        match &mut self.nodes[target as usize] {
            Node::Dict(items) => items.extend(kv),
            Node::Object { items, .. } => items.extend(kv),
            _ => return Err(self.bad("SETITEM on a value that is not a dict")),
        }
        Ok(())
    }
    fn append(&mut self, target: Id, values: Vec<Id>) -> Result<(), PickleError> {
        match &mut self.nodes[target as usize] {
            Node::List(items) => items.extend(values),
            Node::Object { appends, .. } => appends.extend(values),
            _ => return Err(self.bad("APPEND to a value that is not a list")),
        }
        Ok(())
    }
    /// What a call of `callable` with `args` would have built, recorded and never made.
    fn record_call(&mut self, callable: Id, args: Id) -> Result<(), PickleError> {
        self.push(Node::Object {
            callable,
            args,
            state: None,
            items: Vec::new(),
            appends: Vec::new(),
        })
    }
    fn int_bytes(&self, b: &[u8]) -> Result<i64, PickleError> {
        if b.len() > 8 {
            // Python longs wider than 64 bits appear nowhere in checkpoints.
            let sign = if b.last().is_some_and(|&x| x & 0x80 != 0) {
                0xff
            } else {
                0
            };
            if b[8..].iter().any(|&x| x != sign) {
                return Err(self.bad("an integer wider than 64 bits"));
            }
        }
        if b.is_empty() {
            return Ok(0);
        }
        let mut a = if b.last().is_some_and(|&x| x & 0x80 != 0) {
            [0xffu8; 8]
        } else {
            [0u8; 8]
        };
        let n = b.len().min(8);
        a[..n].copy_from_slice(&b[..n]);
        Ok(i64::from_le_bytes(a))
    }

    /// Runs the opcode stream up to `STOP`. Each opcode belongs to one family below, which runs it
    /// and says `true`; an opcode no family knows is refused.
    fn run(&mut self) -> Result<Id, PickleError> {
        loop {
            let at = self.pos;
            let op = self.u8()?;
            if op == b'.' {
                // STOP
                return self.pop();
            }
            let known = self.framing(op)?
                || self.scalar(op)?
                || self.text(op)?
                || self.container(op)?
                || self.fill(op)?
                || self.memo_op(op)?
                || self.object(op, at)?;
            if !known {
                return Err(PickleError::Opcode { op, pos: at });
            }
        }
    }

    /// The opcodes that frame the stream and move the stack: `PROTO`, `FRAME`, `MARK`, `POP`,
    /// `POP_MARK`, `DUP`.
    fn framing(&mut self, op: u8) -> Result<bool, PickleError> {
        match op {
            0x80 => {
                // PROTO
                let p = self.u8()?;
                if p > 5 {
                    return Err(self.bad("pickle protocol newer than 5"));
                }
            }
            0x95 => {
                // FRAME: a length prefix only; the data follows inline.
                self.u64()?;
            }
            b'(' => self.marks.push(self.stack.len()),
            b'0' => {
                self.pop()?;
            }
            b'1' => {
                self.pop_mark()?;
            }
            b'2' => {
                let t = self.top()?;
                self.stack.push(t);
            }
            _ => return Ok(false),
        }
        Ok(true)
    }

    /// The scalars: `NONE`, the bools, the ints and `BINFLOAT`.
    fn scalar(&mut self, op: u8) -> Result<bool, PickleError> {
        match op {
            b'N' => self.push(Node::None)?,
            0x88 => self.push(Node::Bool(true))?,
            0x89 => self.push(Node::Bool(false))?,
            b'K' => {
                let v = self.u8()?;
                self.push(Node::Int(v.into()))?
            }
            b'M' => {
                let v = self.u16()?;
                self.push(Node::Int(v.into()))?
            }
            b'J' => {
                let v = self.u32()? as i32;
                self.push(Node::Int(v.into()))?
            }
            0x8a => {
                let n = self.u8()? as usize;
                let b = self.take(n)?;
                let v = self.int_bytes(b)?;
                self.push(Node::Int(v))?
            }
            0x8b => {
                let n = self.u32()? as usize;
                let b = self.take(n)?;
                let v = self.int_bytes(b)?;
                self.push(Node::Int(v))?
            }
            b'G' => {
                let b = self.take(8)?;
                let mut a = [0u8; 8];
                a.copy_from_slice(b);
                self.push(Node::Float(f64::from_be_bytes(a)))?
            }
            _ => return Ok(false),
        }
        Ok(true)
    }

    /// Strings and bytes, each bounded by the data it was read from.
    fn text(&mut self, op: u8) -> Result<bool, PickleError> {
        match op {
            0x8c => {
                let n = self.u8()? as usize;
                let b = self.take(n)?;
                self.str_node(b)?
            }
            b'X' => {
                let n = self.u32()? as usize;
                let b = self.take(n)?;
                self.str_node(b)?
            }
            0x8d => {
                let n = self.len64()?;
                let b = self.take(n)?;
                self.str_node(b)?
            }
            b'U' => {
                // SHORT_BINSTRING (Python 2 str): latin-1 text.
                let n = self.u8()? as usize;
                let b = self.take(n)?;
                self.push(Node::Str(b.iter().map(|&c| c as char).collect()))?
            }
            b'T' => {
                let n = self.u32()? as usize;
                let b = self.take(n)?;
                self.push(Node::Str(b.iter().map(|&c| c as char).collect()))?
            }
            b'C' => {
                let n = self.u8()? as usize;
                let b = self.take(n)?.to_vec();
                self.push(Node::Bytes(b))?
            }
            b'B' => {
                let n = self.u32()? as usize;
                let b = self.take(n)?.to_vec();
                self.push(Node::Bytes(b))?
            }
            0x8e | 0x96 => {
                let n = self.len64()?;
                let b = self.take(n)?.to_vec();
                self.push(Node::Bytes(b))?
            }
            0x98 => {} // READONLY_BUFFER: no-op on in-band data.
            _ => return Ok(false),
        }
        Ok(true)
    }

    /// Tuples, lists, dicts and sets, built from the stack.
    fn container(&mut self, op: u8) -> Result<bool, PickleError> {
        match op {
            b')' => self.tuple(Vec::new())?,
            0x85 => {
                let a = self.pop()?;
                self.tuple(vec![a])?
            }
            0x86 => {
                let b = self.pop()?;
                let a = self.pop()?;
                self.tuple(vec![a, b])?
            }
            0x87 => {
                let c = self.pop()?;
                let b = self.pop()?;
                let a = self.pop()?;
                self.tuple(vec![a, b, c])?
            }
            b't' => {
                let items = self.pop_mark()?;
                self.tuple(items)?
            }
            b']' => self.push(Node::List(Vec::new()))?,
            b'l' => {
                let items = self.pop_mark()?;
                self.push(Node::List(items))?
            }
            b'}' => self.push(Node::Dict(Vec::new()))?,
            b'd' => {
                let items = self.pop_mark()?;
                let id = Id::try_from(self.nodes.len()).map_err(|_| self.bad("too many values"))?;
                self.push(Node::Dict(Vec::new()))?;
                self.set_items(id, items)?;
            }
            0x8f => self.push(Node::List(Vec::new()))?, // EMPTY_SET, kept as a list
            0x91 => {
                // FROZENSET
                let items = self.pop_mark()?;
                self.push(Node::List(items))?
            }
            _ => return Ok(false),
        }
        Ok(true)
    }

    /// The opcodes that add to the list, set or dict below them: `APPEND(S)`, `ADDITEMS`,
    /// `SETITEM(S)`.
    fn fill(&mut self, op: u8) -> Result<bool, PickleError> {
        match op {
            0x90 => {
                // ADDITEMS
                let items = self.pop_mark()?;
                let target = self.top()?;
                self.append(target, items)?;
            }
            b'a' => {
                let v = self.pop()?;
                let target = self.top()?;
                self.append(target, vec![v])?;
            }
            b'e' => {
                let items = self.pop_mark()?;
                let target = self.top()?;
                self.append(target, items)?;
            }
            b's' => {
                let v = self.pop()?;
                let k = self.pop()?;
                let target = self.top()?;
                self.set_items(target, vec![k, v])?;
            }
            b'u' => {
                let items = self.pop_mark()?;
                let target = self.top()?;
                self.set_items(target, items)?;
            }
            _ => return Ok(false),
        }
        Ok(true)
    }

    /// The memo: `PUT`s and `GET`s.
    fn memo_op(&mut self, op: u8) -> Result<bool, PickleError> {
        match op {
            b'q' => {
                let k = self.u8()?;
                self.memo_put(k.into())?
            }
            b'r' => {
                let k = self.u32()?;
                self.memo_put(k)?
            }
            0x94 => {
                let k = u32::try_from(self.memo.len()).map_err(|_| self.bad("memo too large"))?;
                self.memo_put(k)?
            }
            b'h' => {
                let k = self.u8()?;
                self.memo_get(k.into())?
            }
            b'j' => {
                let k = self.u32()?;
                self.memo_get(k)?
            }
            _ => return Ok(false),
        }
        Ok(true)
    }

    /// Globals and what would be called: each only recorded, never resolved or run; a global
    /// outside the policy and a persistent id where the file kind has none are refused.
    fn object(&mut self, op: u8, at: usize) -> Result<bool, PickleError> {
        match op {
            b'c' => {
                let module = self.line()?;
                let name = self.line()?;
                self.global(module, name)?
            }
            0x93 => {
                let name = self.pop()?;
                let module = self.pop()?;
                let (Node::Str(m), Node::Str(n)) =
                    (&self.nodes[module as usize], &self.nodes[name as usize])
                else {
                    return Err(self.bad("STACK_GLOBAL without two strings"));
                };
                let (m, n) = (m.clone(), n.clone());
                self.global(&m, &n)?
            }
            b'R' | 0x81 => {
                let args = self.pop()?;
                let callable = self.pop()?;
                if !matches!(self.nodes[args as usize], Node::Tuple(_)) {
                    return Err(self.bad("REDUCE/NEWOBJ arguments are not a tuple"));
                }
                self.record_call(callable, args)?
            }
            0x92 => {
                // NEWOBJ_EX: keyword arguments are dropped; no checkpoint class uses them.
                self.pop()?;
                let args = self.pop()?;
                let callable = self.pop()?;
                self.record_call(callable, args)?
            }
            b'b' => {
                let st = self.pop()?;
                let target = self.top()?;
                match &mut self.nodes[target as usize] {
                    Node::Object { state, .. } => *state = Some(st),
                    _ => return Err(self.bad("BUILD on a value that is not an object")),
                }
            }
            b'Q' => {
                let pid = self.pop()?;
                if matches!(self.policy, Globals::DcpMetadata | Globals::Plain) {
                    return Err(PickleError::Opcode { op, pos: at });
                }
                self.push(Node::Persistent(pid))?
            }
            _ => return Ok(false),
        }
        Ok(true)
    }
}

impl Pickle {
    pub fn node(&self, id: Id) -> &Node {
        &self.nodes[id as usize]
    }
    pub fn root(&self) -> &Node {
        self.node(self.root)
    }
    pub fn as_str(&self, id: Id) -> Option<&str> {
        match self.node(id) {
            Node::Str(s) => Some(s),
            _ => None,
        }
    }
    pub fn as_int(&self, id: Id) -> Option<i64> {
        match self.node(id) {
            Node::Int(i) => Some(*i),
            Node::Bool(b) => Some(i64::from(*b)),
            _ => None,
        }
    }
    /// The items of a tuple or list.
    pub fn seq(&self, id: Id) -> Option<&[Id]> {
        match self.node(id) {
            Node::Tuple(v) | Node::List(v) => Some(v),
            _ => None,
        }
    }
    /// The `(module, name)` of a global, looking through nothing else.
    pub fn global(&self, id: Id) -> Option<(&str, &str)> {
        match self.node(id) {
            Node::Global(m, n) => Some((m, n)),
            _ => None,
        }
    }
    /// The class (or function) an object was built from.
    pub fn class_of(&self, id: Id) -> Option<(&str, &str)> {
        match self.node(id) {
            Node::Object { callable, .. } => self.global(*callable),
            _ => None,
        }
    }
    /// The key/value pairs of a dict, of an `OrderedDict(...)`, or of an object's dict state.
    pub fn pairs(&self, id: Id) -> Option<&[(Id, Id)]> {
        match self.node(id) {
            Node::Dict(items) => Some(items),
            Node::Object { items, state, .. } => {
                if !items.is_empty() {
                    Some(items)
                } else if let Some(st) = state {
                    match self.node(*st) {
                        Node::Dict(items) => Some(items),
                        _ => Some(items),
                    }
                } else {
                    Some(items)
                }
            }
            _ => None,
        }
    }
    /// `dict[key]` for a string key.
    pub fn get(&self, id: Id, key: &str) -> Option<Id> {
        self.pairs(id)?
            .iter()
            .find(|(k, _)| self.as_str(*k) == Some(key))
            .map(|&(_, v)| v)
    }
    /// A tuple of ints, or a `torch.Size((…))`.
    pub fn ints(&self, id: Id) -> Option<Vec<i64>> {
        let id = match self.node(id) {
            Node::Object { callable, args, .. }
                if self.global(*callable) == Some(("torch", "Size")) =>
            {
                *self.seq(*args)?.first()?
            }
            _ => id,
        };
        self.seq(id)?.iter().map(|&i| self.as_int(i)).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn memo_shares_mutable_dicts() {
        // {} MEMOIZE ; MARK 'a' K1 SETITEMS ; then a tuple (d, memo[0]) -> both see the item.
        let data = b"\x80\x04}\x94(\x8c\x01aK\x01uh\x00\x86.";
        let p = load(data, Globals::DcpMetadata).unwrap();
        let t = p.seq(p.root).unwrap();
        assert_eq!(t[0], t[1]);
        assert_eq!(p.get(t[0], "a").and_then(|v| p.as_int(v)), Some(1));
    }

    #[test]
    fn refuses_globals_outside_the_policy() {
        let data = b"\x80\x02cos\nsystem\nq\x00.";
        let err = load(data, Globals::DcpMetadata).unwrap_err();
        assert!(matches!(err, PickleError::Global { .. }), "{err}");
        assert!(load(data, Globals::TorchWeights).is_err());
        assert!(load(data, Globals::Any).is_ok());
    }

    #[test]
    fn truncated_and_bad_lengths_are_errors_not_allocations() {
        assert!(matches!(
            load(
                b"\x80\x04\x8d\xff\xff\xff\xff\xff\xff\xff\x7f",
                Globals::Any
            ),
            Err(PickleError::Truncated(_))
        ));
        assert!(load(b"\x80\x04", Globals::Any).is_err());
        assert!(load(b"h\x05.", Globals::Any).is_err());
        assert!(load(b"u.", Globals::Any).is_err());
    }

    #[test]
    fn long1_and_negative_ints() {
        let p = load(b"\x8a\x05\x00\x00\x00\x00\x01.", Globals::Any).unwrap();
        assert_eq!(p.as_int(p.root), Some(1 << 32));
        let p = load(b"J\xff\xff\xff\xff.", Globals::Any).unwrap();
        assert_eq!(p.as_int(p.root), Some(-1));
        let p = load(b"\x8a\x01\xff.", Globals::Any).unwrap();
        assert_eq!(p.as_int(p.root), Some(-1));
    }

    #[test]
    fn every_supported_opcode_is_run_by_exactly_one_family() {
        // Every opcode `Vm::run` knows but STOP, which it runs itself.
        const SUPPORTED: &[u8] = &[
            0x80, 0x95, b'(', b'0', b'1', b'2', // framing and the stack
            b'N', 0x88, 0x89, b'K', b'M', b'J', 0x8a, 0x8b, b'G', // scalars
            0x8c, b'X', 0x8d, b'U', b'T', b'C', b'B', 0x8e, 0x96, 0x98, // text and bytes
            b')', 0x85, 0x86, 0x87, b't', b']', b'l', b'}', b'd', 0x8f, 0x91, // containers
            0x90, b'a', b'e', b's', b'u', // filling them
            b'q', b'r', 0x94, b'h', b'j', // the memo
            b'c', 0x93, b'R', 0x81, 0x92, b'b', b'Q', // globals and calls
        ];
        for op in 0..=255u8 {
            // A family that does not know `op` says so without touching the machine; one that does
            // runs it on an empty stream and stack, and fails or not.
            let fresh = || Vm::new(b"", Globals::Any);
            let claims = [
                fresh().framing(op),
                fresh().scalar(op),
                fresh().text(op),
                fresh().container(op),
                fresh().fill(op),
                fresh().memo_op(op),
                fresh().object(op, 0),
            ]
            .into_iter()
            .filter(|r| *r != Ok(false))
            .count();
            let expected = usize::from(SUPPORTED.contains(&op));
            assert_eq!(claims, expected, "opcode 0x{op:02x}");
        }
    }

    #[test]
    fn unknown_opcodes_and_persistent_ids_outside_torch_files_are_refused_where_they_stand() {
        assert_eq!(
            load(b"\x80\x02K\x01\xff.", Globals::Any).unwrap_err(),
            PickleError::Opcode { op: 0xff, pos: 4 }
        );
        let persid = b"K\x01Q.";
        let p = load(persid, Globals::TorchWeights).unwrap();
        assert_eq!(p.root(), &Node::Persistent(0));
        for policy in [Globals::DcpMetadata, Globals::Plain] {
            assert_eq!(
                load(persid, policy).unwrap_err(),
                PickleError::Opcode { op: b'Q', pos: 2 }
            );
        }
    }
}
