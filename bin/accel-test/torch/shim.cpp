// The C ABI between accel's Rust code and libtorch's c10d: a TCPStore for the rendezvous, a gloo (and,
// when built with CUDA/NCCL headers, an NCCL) process group, and the collectives accel-test checks.
// Tensors cross as tch's `torch::Tensor*`. Every entry point catches every C++ exception and returns it
// as a malloc'd message (NULL on success), so a c10d failure is a Rust error, never an abort.

#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>
#ifdef ACCEL_WITH_NCCL
#include <torch/csrc/distributed/c10d/ProcessGroupNCCL.hpp>
#endif
#include <torch/torch.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <string>
#include <vector>

namespace {

char* dup_error(const std::string& message) {
  char* out = static_cast<char*>(std::malloc(message.size() + 1));
  if (out != nullptr) {
    std::memcpy(out, message.c_str(), message.size() + 1);
  }
  return out;
}

template <typename F>
char* guarded(F&& body) {
  try {
    body();
    return nullptr;
  } catch (const c10::Error& e) {
    // what() carries a C++ backtrace; the message alone is what a user can act on.
    return dup_error(e.msg());
  } catch (const std::exception& e) {
    return dup_error(e.what());
  } catch (...) {
    return dup_error("unknown C++ exception");
  }
}

std::chrono::milliseconds ms(int64_t v) { return std::chrono::milliseconds(v); }

void wait_work(const c10::intrusive_ptr<c10d::Work>& work, int64_t timeout_ms) {
  if (!work->wait(ms(timeout_ms))) {
    throw std::runtime_error("timed out after " + std::to_string(timeout_ms) + " ms");
  }
}

c10d::ReduceOp reduce_op(int op) {
  switch (op) {
    case 0:
      return c10d::ReduceOp(c10d::ReduceOp::SUM);
    case 1:
      return c10d::ReduceOp(c10d::ReduceOp::MAX);
    case 2:
      return c10d::ReduceOp(c10d::ReduceOp::MIN);
    case 3:
      return c10d::ReduceOp(c10d::ReduceOp::AVG);
    case 4:
      return c10d::ReduceOp(c10d::ReduceOp::PRODUCT);
    default:
      throw std::invalid_argument("unknown reduce op " + std::to_string(op));
  }
}

}  // namespace

struct accel_store {
  c10::intrusive_ptr<c10d::Store> tcp;
};

struct accel_pg {
  c10::intrusive_ptr<c10d::Backend> backend;
};

extern "C" {

void accel_free_error(char* error) { std::free(error); }

// libtorch's log level from TORCH_CPP_LOG_LEVEL, as `import torch` sets it (torch/csrc/Module.cpp calls
// c10::initLogging): a C++ program that never calls it prints c10d's warnings whatever the variable says.
void accel_init_logging() { c10::initLogging(); }

int accel_has_nccl() {
#ifdef ACCEL_WITH_NCCL
  return 1;
#else
  return 0;
#endif
}

char* accel_store_new(const char* host, uint16_t port, int64_t world_size, int is_server,
                      int64_t timeout_ms, accel_store** out) {
  return guarded([&] {
    c10d::TCPStoreOptions opts;
    opts.port = port;
    opts.isServer = is_server != 0;
    opts.numWorkers = static_cast<std::size_t>(world_size);
    // Arrival is checked key by key afterwards, so that a rank that never comes is named.
    opts.waitWorkers = false;
    opts.timeout = ms(timeout_ms);
    // torch.distributed's env:// rendezvous lets several stores share rank 0's port.
    opts.multiTenant = true;
    auto store = c10::make_intrusive<c10d::TCPStore>(std::string(host), opts);
    *out = new accel_store{store};
  });
}

void accel_store_free(accel_store* store) { delete store; }

char* accel_store_set(accel_store* store, const char* key, const uint8_t* value, size_t len) {
  return guarded([&] {
    std::vector<uint8_t> data(value, value + len);
    store->tcp->set(std::string(key), data);
  });
}

char* accel_store_check(accel_store* store, const char* key, int* exists) {
  return guarded([&] { *exists = store->tcp->check({std::string(key)}) ? 1 : 0; });
}

char* accel_store_get(accel_store* store, const char* key, int64_t timeout_ms, uint8_t** value,
                      size_t* len) {
  return guarded([&] {
    auto old = store->tcp->getTimeout();
    store->tcp->setTimeout(ms(timeout_ms));
    std::vector<uint8_t> data;
    try {
      data = store->tcp->get(std::string(key));
    } catch (...) {
      store->tcp->setTimeout(old);
      throw;
    }
    store->tcp->setTimeout(old);
    *len = data.size();
    *value = static_cast<uint8_t*>(std::malloc(data.size() + 1));
    if (*value == nullptr) {
      throw std::bad_alloc();
    }
    std::memcpy(*value, data.data(), data.size());
  });
}

void accel_free_bytes(uint8_t* bytes) { std::free(bytes); }

// The process group torch.distributed.init_process_group("gloo") builds on the same store: the same
// key prefixes ("default_pg" / group "0" / device "cpu"), so Python ranks and accel ranks meet.
char* accel_pg_new_gloo(accel_store* store, int64_t rank, int64_t size, int64_t timeout_ms,
                        const char* ifnames, accel_pg** out) {
  return guarded([&] {
    auto prefixed = c10::make_intrusive<c10d::PrefixStore>(
        "cpu/", c10::make_intrusive<c10d::PrefixStore>(
                    "0/", c10::make_intrusive<c10d::PrefixStore>("default_pg", store->tcp)));
    auto opts = c10d::ProcessGroupGloo::Options::create(ms(timeout_ms));
    std::string names(ifnames == nullptr ? "" : ifnames);
    if (names.empty()) {
      opts->devices.push_back(c10d::ProcessGroupGloo::createDefaultDevice());
    } else {
      size_t start = 0;
      while (start <= names.size()) {
        size_t comma = names.find(',', start);
        if (comma == std::string::npos) comma = names.size();
        auto name = names.substr(start, comma - start);
        if (!name.empty()) {
          opts->devices.push_back(c10d::ProcessGroupGloo::createDeviceForInterface(name));
        }
        start = comma + 1;
      }
    }
    auto pg = c10::make_intrusive<c10d::ProcessGroupGloo>(prefixed, static_cast<int>(rank),
                                                          static_cast<int>(size), opts);
    pg->setSequenceNumberForGroup();
    *out = new accel_pg{pg};
  });
}

char* accel_pg_new_nccl(accel_store* store, int64_t rank, int64_t size, int64_t timeout_ms,
                        accel_pg** out) {
#ifdef ACCEL_WITH_NCCL
  return guarded([&] {
    auto prefixed = c10::make_intrusive<c10d::PrefixStore>(
        "cuda/", c10::make_intrusive<c10d::PrefixStore>(
                     "0/", c10::make_intrusive<c10d::PrefixStore>("default_pg", store->tcp)));
    auto opts = c10d::ProcessGroupNCCL::Options::create();
    opts->timeout = ms(timeout_ms);
    opts->is_high_priority_stream = false;
    auto pg = c10::make_intrusive<c10d::ProcessGroupNCCL>(prefixed, static_cast<int>(rank),
                                                          static_cast<int>(size), opts);
    pg->setSequenceNumberForGroup();
    *out = new accel_pg{pg};
  });
#else
  (void)store;
  (void)rank;
  (void)size;
  (void)timeout_ms;
  (void)out;
  return dup_error("this accel-test was built without NCCL support (no CUDA/NCCL headers at build time)");
#endif
}

void accel_pg_free(accel_pg* pg) { delete pg; }

char* accel_pg_allreduce(accel_pg* pg, at::Tensor* tensor, int op, int64_t timeout_ms) {
  return guarded([&] {
    std::vector<at::Tensor> tensors{*tensor};
    c10d::AllreduceOptions opts;
    opts.reduceOp = reduce_op(op);
    opts.timeout = ms(timeout_ms);
    wait_work(pg->backend->allreduce(tensors, opts), timeout_ms);
  });
}

char* accel_pg_reduce(accel_pg* pg, at::Tensor* tensor, int64_t root, int op, int64_t timeout_ms) {
  return guarded([&] {
    std::vector<at::Tensor> tensors{*tensor};
    c10d::ReduceOptions opts;
    opts.reduceOp = reduce_op(op);
    opts.rootRank = root;
    opts.timeout = ms(timeout_ms);
    wait_work(pg->backend->reduce(tensors, opts), timeout_ms);
  });
}

char* accel_pg_broadcast(accel_pg* pg, at::Tensor* tensor, int64_t root, int64_t timeout_ms) {
  return guarded([&] {
    std::vector<at::Tensor> tensors{*tensor};
    c10d::BroadcastOptions opts;
    opts.rootRank = root;
    opts.timeout = ms(timeout_ms);
    wait_work(pg->backend->broadcast(tensors, opts), timeout_ms);
  });
}

// torch.distributed.all_gather(list, tensor): one output tensor per rank.
char* accel_pg_allgather(accel_pg* pg, at::Tensor** outputs, size_t n, at::Tensor* input,
                         int64_t timeout_ms) {
  return guarded([&] {
    std::vector<std::vector<at::Tensor>> outs(1);
    for (size_t i = 0; i < n; ++i) outs[0].push_back(*outputs[i]);
    std::vector<at::Tensor> ins{*input};
    c10d::AllgatherOptions opts;
    opts.timeout = ms(timeout_ms);
    wait_work(pg->backend->allgather(outs, ins, opts), timeout_ms);
  });
}

// torch.distributed.all_gather_into_tensor: one flat output, what the benchmark measures.
char* accel_pg_allgather_flat(accel_pg* pg, at::Tensor* output, at::Tensor* input,
                              int64_t timeout_ms) {
  return guarded([&] {
    c10d::AllgatherOptions opts;
    opts.timeout = ms(timeout_ms);
    wait_work(pg->backend->_allgather_base(*output, *input, opts), timeout_ms);
  });
}

// torch.distributed.gather: outputs only on the root (n == 0 elsewhere).
char* accel_pg_gather(accel_pg* pg, at::Tensor** outputs, size_t n, at::Tensor* input,
                      int64_t root, int64_t timeout_ms) {
  return guarded([&] {
    std::vector<std::vector<at::Tensor>> outs;
    if (n > 0) {
      outs.emplace_back();
      for (size_t i = 0; i < n; ++i) outs[0].push_back(*outputs[i]);
    }
    std::vector<at::Tensor> ins{*input};
    c10d::GatherOptions opts;
    opts.rootRank = root;
    opts.timeout = ms(timeout_ms);
    wait_work(pg->backend->gather(outs, ins, opts), timeout_ms);
  });
}

// Point-to-point, for --probe: torch.distributed.send / recv (a CUDA tensor goes through NCCL p2p).
char* accel_pg_send(accel_pg* pg, at::Tensor* tensor, int64_t dst, int64_t tag,
                    int64_t timeout_ms) {
  return guarded([&] {
    std::vector<at::Tensor> tensors{*tensor};
    wait_work(pg->backend->send(tensors, static_cast<int>(dst), static_cast<int>(tag)),
              timeout_ms);
  });
}

char* accel_pg_recv(accel_pg* pg, at::Tensor* tensor, int64_t src, int64_t tag,
                    int64_t timeout_ms) {
  return guarded([&] {
    std::vector<at::Tensor> tensors{*tensor};
    wait_work(pg->backend->recv(tensors, static_cast<int>(src), static_cast<int>(tag)),
              timeout_ms);
  });
}

char* accel_pg_barrier(accel_pg* pg, int64_t timeout_ms) {
  return guarded([&] {
    c10d::BarrierOptions opts;
    opts.timeout = ms(timeout_ms);
    wait_work(pg->backend->barrier(opts), timeout_ms);
  });
}

}  // extern "C"
