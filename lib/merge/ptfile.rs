//! A torch.save file as the readers of per-rank files (DeepSpeed's, FSDP's) use it: mapped and
//! watched as an input, its zip archive indexed, its pickle run under the reader's policy, and each
//! tensor's storage record found and bounds-checked, with the records read kept for the CRC-32 check.

use std::path::Path;

use super::input::Input;
use super::pickle::{self, Globals, Id, Node, Pickle};
use super::tensor::TensorRef;
use super::torchzip;
use super::{open_input, Crc, MergeError};

/// A loaded torch.save file: mapping, archive and pickle.
pub(super) struct PtFile {
    /// Its index in the checkpoint's inputs.
    pub(super) input: usize,
    pub(super) zip: torchzip::Archive,
    pub(super) pickle: Pickle,
    pub(super) big_endian: bool,
    /// The records read so far, for the CRC-32 check.
    pub(super) read: std::cell::RefCell<Vec<Crc>>,
}

impl PtFile {
    /// Maps `path`, adds it to `inputs` and runs its pickle under `policy`.
    pub(super) fn load(
        path: &Path,
        inputs: &mut Vec<Input>,
        policy: Globals,
    ) -> Result<PtFile, MergeError> {
        Self::load_or(path, inputs, policy, |_| None)
    }
    /// [`PtFile::load`], with `refusal` giving the error for a pickle the policy refuses where the
    /// reader knows better what the file is than the pickle's first unexpected global says.
    pub(super) fn load_or(
        path: &Path,
        inputs: &mut Vec<Input>,
        policy: Globals,
        refusal: impl FnOnce(&pickle::PickleError) -> Option<MergeError>,
    ) -> Result<PtFile, MergeError> {
        let input = open_input(path)?;
        let bad = |m: String| MergeError::Invalid {
            path: path.to_path_buf(),
            message: m,
        };
        let bytes = input.bytes();
        let zip = torchzip::open(bytes).map_err(|e| bad(e.to_string()))?;
        let rec = zip.get_record("data.pkl").map_err(|e| bad(e.to_string()))?;
        let pickle = pickle::load(&bytes[rec.data.clone()], policy)
            .map_err(|e| refusal(&e).unwrap_or_else(|| bad(e.to_string())))?;
        let big_endian = zip.big_endian(bytes);
        let first = Crc {
            input: inputs.len(),
            range: rec.data.clone(),
            expected: rec.crc32,
            name: rec.name.clone(),
        };
        inputs.push(input);
        Ok(PtFile {
            input: inputs.len() - 1,
            zip,
            pickle,
            big_endian,
            read: std::cell::RefCell::new(vec![first]),
        })
    }
    pub(super) fn bad(&self, inputs: &[Input], m: impl Into<String>) -> MergeError {
        MergeError::Invalid {
            path: inputs[self.input].path.clone(),
            message: m.into(),
        }
    }
    /// [`PtFile::tensor`], except that a tensor of a dtype accel cannot write is noted in
    /// `unwritable` (it blocks only a merge that selects it) and gives `None`.
    pub(super) fn tensor_or_unwritable(
        &self,
        inputs: &[Input],
        id: Id,
        name: &str,
        unwritable: &mut Vec<super::Unwritable>,
    ) -> Result<Option<(TensorRef, usize)>, MergeError> {
        match self.tensor(inputs, id, name) {
            Ok(t) => Ok(Some(t)),
            Err(MergeError::Dtype { dtype, .. }) => {
                unwritable.push(super::Unwritable {
                    path: vec![name.to_owned()],
                    dtype,
                });
                Ok(None)
            }
            Err(e) => Err(e),
        }
    }
    /// A tensor value: its view and the byte offset of its storage in the file, bounds-checked.
    pub(super) fn tensor(
        &self,
        inputs: &[Input],
        id: Id,
        what: &str,
    ) -> Result<(TensorRef, usize), MergeError> {
        let t = TensorRef::from_pickle(&self.pickle, id).map_err(|e| match e {
            super::tensor::TensorError::Dtype(d) => MergeError::Dtype {
                fqn: what.to_owned(),
                dtype: d,
            },
            e => self.bad(inputs, format!("{what}: {e}")),
        })?;
        let record = self
            .zip
            .get_record(&format!("data/{}", t.key))
            .map_err(|e| self.bad(inputs, e.to_string()))?;
        let rec = record.data.clone();
        self.read.borrow_mut().push(Crc {
            input: self.input,
            range: rec.clone(),
            expected: record.crc32,
            name: record.name.clone(),
        });
        let need = t
            .extent()
            .and_then(|x| x.checked_mul(t.dtype.size() as u64))
            .unwrap_or(u64::MAX);
        if need > rec.len() as u64 {
            return Err(self.bad(
                inputs,
                format!("{what}: the tensor reaches past its storage"),
            ));
        }
        Ok((t, rec.start))
    }
    pub(super) fn get(&self, id: Id, key: &str) -> Option<Id> {
        self.pickle.get(id, key)
    }
    pub(super) fn int(&self, id: Id) -> Option<i64> {
        match self.pickle.node(id) {
            // An int Enum such as ZeroStageEnum is REDUCE(cls, (value,)).
            Node::Object { args, .. } => self
                .pickle
                .seq(*args)?
                .first()
                .and_then(|&v| self.pickle.as_int(v)),
            _ => self.pickle.as_int(id),
        }
    }
}
