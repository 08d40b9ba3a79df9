// coll_torch.cpp - a torch.distributed process group ("coll") over coll's native API.
//
// Each ProcessGroupColl owns one coll communicator and one worker thread. A collective call
// from Python checks its tensors, queues the operation and returns a Work at once; the
// worker runs the queue in order with coll's blocking calls, then completes the Work and its
// Future. So the comm is only ever touched by one thread (coll's rule: one thread per comm),
// operations keep the order they were issued in on every rank (the order coll matches
// messages by), and autograd threads that issue DDP's all-reduces never block on the wire.
//
// Point to point runs beside the collectives, not in their queue, because torch's send and
// recv are not collective: a receive may name no source, match by tag, or wait for a sender
// that first joins a collective. Each ordered pair of ranks has a two-rank comm of its own
// (a "channel", made at init) on which only its sender sends: a header (tag, bytes) then the payload. A thread per incoming channel receives every
// message as soon as it comes and hands it to the oldest posted receive that matches its
// source and tag, or keeps it until one is posted (MPI's matching: in order per source and
// tag). So no message is ever left on the collectives' comm, a receive from any source is
// the first matching message of any channel, and a send completes once the receiver's
// thread has taken it, whatever the receiving program does.
//
// Timeouts: the group's timeout (init_process_group(timeout=...)) becomes the comm's
// COLL_TIMEOUT_MS unless the environment sets that variable; a receive that nothing matches
// fails after the same time. The channels themselves wait without limit (an idle channel is
// not a stuck one); a dead peer closes them.
//
// Failures: a peer's death fails the comm on every rank (coll's control plane), so the
// operation running or queued completes its Work with coll's message, and so does every one
// after it. The channels follow the comm: the death ends the dead rank's incoming channel on
// every rank, which fails every posted receive (any source included) and later sends and
// receives. A failed group closes without waiting for the dead: coll's destroy of a failed
// comm does not wait, and the channels are destroyed all at once, not one by one.
//
// CPU tensors only: coll's host path. A non-contiguous tensor is worked on through a
// contiguous copy that is written back when the operation completes.
#include <torch/extension.h>

#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>
#include <torch/csrc/distributed/c10d/Store.hpp>
#include <torch/csrc/distributed/c10d/Types.hpp>
#include <torch/csrc/distributed/c10d/Work.hpp>

#include <pybind11/chrono.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <deque>
#include <functional>
#include <list>
#include <map>
#include <mutex>
#include <thread>

extern "C" {
#include "coll.h"
}

namespace {

coll_dtype_t to_coll_dtype(const at::Tensor &t)
{
    switch (t.scalar_type()) {
    case at::kChar: return COLL_INT8;
    case at::kByte: return COLL_UINT8;
    case at::kBool: return COLL_UINT8;
    case at::kInt: return COLL_INT32;
    case at::kLong: return COLL_INT64;
    case at::kHalf: return COLL_FLOAT16;
    case at::kFloat: return COLL_FLOAT32;
    case at::kDouble: return COLL_FLOAT64;
    case at::kBFloat16: return COLL_BFLOAT16;
    default:
        TORCH_CHECK(false, "ProcessGroupColl: unsupported tensor type ", t.scalar_type());
    }
}

coll_op_t to_coll_op(const c10d::ReduceOp &op, const at::Tensor &t)
{
    // Sums and products of booleans are not booleans; max and min are OR and AND.
    bool is_bool = t.scalar_type() == at::kBool;
    switch (op) {
    case c10d::ReduceOp::SUM:
        TORCH_CHECK(!is_bool, "ProcessGroupColl: SUM of bool tensors; use MAX (logical or)");
        return COLL_SUM;
    case c10d::ReduceOp::PRODUCT:
        TORCH_CHECK(!is_bool, "ProcessGroupColl: PRODUCT of bool tensors; use MIN (logical and)");
        return COLL_PROD;
    case c10d::ReduceOp::MIN: return COLL_MIN;
    case c10d::ReduceOp::MAX: return COLL_MAX;
    case c10d::ReduceOp::AVG:
        TORCH_CHECK(!is_bool, "ProcessGroupColl: AVG of bool tensors");
        return COLL_AVG;
    case c10d::ReduceOp::BAND:
    case c10d::ReduceOp::BOR:
    case c10d::ReduceOp::BXOR:
        TORCH_CHECK(!at::isFloatingType(t.scalar_type()) && !at::isComplexType(t.scalar_type()),
                    "ProcessGroupColl: bitwise reduce ops (BAND, BOR, BXOR) need integer or "
                    "bool tensors, not ", t.scalar_type());
        return op == c10d::ReduceOp::BAND ? COLL_BAND
               : op == c10d::ReduceOp::BOR ? COLL_BOR : COLL_BXOR;
    default:
        TORCH_CHECK(false, "ProcessGroupColl: reduce op ", static_cast<int>(op),
                    " is not supported (SUM, PRODUCT, MIN, MAX, AVG, BAND, BOR, BXOR are)");
    }
}

// Collectives that only move data move bytes: every dtype works, even those coll has no
// arithmetic for (int16, complex...).
size_t nbytes(const at::Tensor &t)
{
    return static_cast<size_t>(t.numel()) * t.element_size();
}

// Contiguous uint8 bytes seen as a tensor shaped and typed as like.
at::Tensor from_bytes(const at::Tensor &bytes, const at::Tensor &like)
{
    return bytes.view(like.scalar_type()).view(like.sizes());
}

void check_cpu(const at::Tensor &t, const char *what)
{
    TORCH_CHECK(t.device().is_cpu(), "ProcessGroupColl: ", what,
                " must be a CPU tensor (coll's host path), not ", t.device());
}

void check_one(const std::vector<at::Tensor> &ts, const char *what)
{
    TORCH_CHECK(ts.size() == 1, "ProcessGroupColl: ", what, " takes one tensor per rank, got ",
                ts.size());
    check_cpu(ts[0], what);
}

void check_status(coll_status_t st, coll_comm_t *comm, const char *what)
{
    if (st != COLL_SUCCESS)
        TORCH_CHECK(false, "ProcessGroupColl: ", what, " failed: ", coll_status_string(st), ": ",
                    coll_last_error(comm));
}

// A tensor worked on in place: the tensor itself when contiguous, else a contiguous copy
// that is copied back by finish().
struct Flat {
    at::Tensor user, work;
    explicit Flat(const at::Tensor &t) : user(t), work(t.is_contiguous() ? t : t.contiguous()) {}
    void finish()
    {
        if (!work.is_same(user))
            user.copy_(work);
    }
};

// Works are completed on threads of their own, never on the worker or a channel's reader:
// a Future runs its callbacks where it is marked complete, and PyTorch's own hooks
// (powerSGD_hook) wait inside a callback for the next collective of the same group, which
// the worker must be free to run. A thread is added whenever no idle one is left, so a
// callback that blocks never holds up another completion; threads stay for reuse.
class Completer {
  public:
    static void post(std::function<void()> fn) { instance().push(std::move(fn)); }

  private:
    // Never destroyed: its threads may still be parked when the process exits.
    static Completer &instance()
    {
        static Completer *c = new Completer();
        return *c;
    }

    void push(std::function<void()> fn)
    {
        std::lock_guard<std::mutex> g(m_);
        q_.push_back(std::move(fn));
        if (idle_ < q_.size())
            std::thread([this] { loop(); }).detach();
        else
            cv_.notify_one();
    }

    void loop()
    {
        std::unique_lock<std::mutex> g(m_);
        for (;;) {
            idle_++;
            cv_.wait(g, [this] { return !q_.empty(); });
            idle_--;
            auto fn = std::move(q_.front());
            q_.pop_front();
            g.unlock();
            fn();
            fn = nullptr; // the Work's last reference may go here, not under the lock
            g.lock();
        }
    }

    std::mutex m_;
    std::condition_variable cv_;
    std::deque<std::function<void()>> q_;
    size_t idle_ = 0;
};

class CollWork : public c10d::Work {
  public:
    CollWork(int rank, c10d::OpType type, std::vector<at::Tensor> outputs,
             std::function<void()> run)
        : c10d::Work(rank, type), outputs_(std::move(outputs)), run_(std::move(run)),
          future_(c10::make_intrusive<c10::ivalue::Future>(
              c10::ListType::create(c10::TensorType::get())))
    {
    }

    // On the worker thread.
    void execute()
    {
        try {
            run_();
        } catch (...) {
            fail(std::current_exception());
            return;
        }
        succeed();
    }

    // Completion happens on Completer's threads (see there). The future first: whoever
    // wait() releases may look at it at once.
    void succeed()
    {
        auto self = c10::intrusive_ptr<CollWork>::unsafe_reclaim_from_nonowning(this);
        Completer::post([self] {
            self->future_->markCompleted(c10::IValue(self->outputs_));
            self->finish();
        });
    }

    void fail(std::exception_ptr e)
    {
        auto self = c10::intrusive_ptr<CollWork>::unsafe_reclaim_from_nonowning(this);
        Completer::post([self, e] {
            self->future_->setError(e);
            self->finish(e);
        });
    }

    // Inside a coll group: record the call (its status arrives with coll_group_end).
    void record()
    {
        try {
            run_();
        } catch (...) {
        }
    }

    void complete(coll_status_t st, coll_comm_t *comm)
    {
        if (st == COLL_SUCCESS) {
            succeed();
            return;
        }
        try {
            check_status(st, comm, "coalesced operation");
        } catch (...) {
            fail(std::current_exception());
        }
    }

    std::vector<at::Tensor> result() override { return outputs_; }
    c10::intrusive_ptr<c10::ivalue::Future> getFuture() override { return future_; }
    int sourceRank() const override { return source_.load(); }
    void set_source(int r) { source_.store(r); }

    // A receive: wait() without a timeout of its own gives up after limit (the group's
    // timeout); cancel withdraws the posted receive, false once a message is being taken.
    void set_limit(std::chrono::milliseconds limit, std::function<bool()> cancel)
    {
        limit_ = limit;
        posted_at_ = std::chrono::steady_clock::now();
        cancel_ = std::move(cancel);
    }

    bool wait(std::chrono::milliseconds timeout = ::kNoTimeout) override
    {
        if (timeout == ::kNoTimeout && limit_.count() > 0) {
            bool done;
            {
                std::unique_lock<std::mutex> g(mutex_);
                done = cv_.wait_until(g, posted_at_ + limit_, [this] { return completed_; });
            }
            if (!done && cancel_ && cancel_()) {
                try {
                    TORCH_CHECK(false, "ProcessGroupColl: recv: no matching message within ",
                                limit_.count(), " ms (the group's timeout or COLL_TIMEOUT_MS)");
                } catch (...) {
                    fail(std::current_exception());
                }
            }
        }
        return c10d::Work::wait(timeout);
    }

  private:
    std::vector<at::Tensor> outputs_;
    std::function<void()> run_;
    c10::intrusive_ptr<c10::ivalue::Future> future_;
    std::atomic<int> source_{-1};
    std::chrono::milliseconds limit_{0};
    std::chrono::steady_clock::time_point posted_at_;
    std::function<bool()> cancel_;
};

// Process-wide: coll reads its knobs from the environment when a comm is made, and the
// group's timeout has to reach it that way.
std::mutex env_mutex;

struct EnvOverride {
    std::string name, old;
    bool had;
    EnvOverride(const char *n, const std::string &v) : name(n)
    {
        const char *o = std::getenv(n);
        had = o != nullptr;
        if (had)
            old = o;
        setenv(n, v.c_str(), 1);
    }
    ~EnvOverride()
    {
        if (had)
            setenv(name.c_str(), old.c_str(), 1);
        else
            unsetenv(name.c_str());
    }
};

// What crosses a channel before each payload.
struct P2pHeader {
    int64_t magic;
    int64_t tag;
    int64_t bytes;
};
constexpr int64_t kP2pMagic = 0x636f6c6c70327031; // "collp2p1"

class ProcessGroupColl : public c10d::ProcessGroup {
  public:
    ProcessGroupColl(const c10::intrusive_ptr<c10d::Store> &store, int rank, int size,
                     std::chrono::milliseconds timeout)
        : c10d::ProcessGroup(rank, size)
    {
        std::lock_guard<std::mutex> env(env_mutex);
        const char *user = std::getenv("COLL_TIMEOUT_MS");
        if (user && *user) {
            recv_limit_ = std::chrono::milliseconds(std::strtoll(user, nullptr, 10));
            init_comm(store, "coll_unique_id", 0, rank, size, &comm_);
        } else {
            recv_limit_ = timeout;
            EnvOverride t("COLL_TIMEOUT_MS", std::to_string(timeout.count()));
            init_comm(store, "coll_unique_id", 0, rank, size, &comm_);
        }
        try {
            init_channels(store);
        } catch (...) {
            close_channels();
            coll_comm_destroy(comm_);
            throw;
        }
        worker_ = std::thread([this] { loop(); });
    }

    ~ProcessGroupColl() override
    {
        // The last reference may go from Python (DDP's reducer), with the GIL held; the
        // worker's last Works may hold tensors whose release takes the GIL.
        if (Py_IsInitialized() && PyGILState_Check()) {
            py::gil_scoped_release nogil;
            shutdown();
        } else {
            shutdown();
        }
    }

    std::chrono::milliseconds timeout_ms() const { return recv_limit_; }

  private:
    void shutdown()
    {
        {
            std::lock_guard<std::mutex> g(m_);
            stop_ = true;
        }
        cv_.notify_all();
        worker_.join();
        close_channels();
        for (auto &kv : feedback_)
            coll_quant_feedback_destroy(kv.second.second);
        coll_comm_destroy(comm_);
    }

  public:

    const std::string getBackendName() const override { return "coll"; }

    c10::intrusive_ptr<c10d::Work> broadcast(std::vector<at::Tensor> &ts,
                                             const c10d::BroadcastOptions &opts) override
    {
        check_one(ts, "broadcast");
        TORCH_CHECK(opts.rootTensor == 0, "ProcessGroupColl: rootTensor must be 0");
        int root = check_rank(opts.rootRank, "root");
        auto f = std::make_shared<Flat>(ts[0]);
        return enqueue(c10d::OpType::BROADCAST, ts, [this, f, root] {
            auto &w = f->work;
            check_status(coll_broadcast(w.data_ptr(), w.data_ptr(), nbytes(w), COLL_UINT8, root,
                                        comm_),
                         comm_, "broadcast");
            f->finish();
        }, true);
    }

    c10::intrusive_ptr<c10d::Work> allreduce(std::vector<at::Tensor> &ts,
                                             const c10d::AllreduceOptions &opts) override
    {
        check_one(ts, "allreduce");
        coll_op_t op = to_coll_op(opts.reduceOp, ts[0]);
        to_coll_dtype(ts[0]);
        auto f = std::make_shared<Flat>(ts[0]);
        return enqueue(c10d::OpType::ALLREDUCE, ts, [this, f, op] {
            auto &w = f->work;
            check_status(coll_allreduce(w.data_ptr(), w.data_ptr(), w.numel(), to_coll_dtype(w),
                                        op, comm_),
                         comm_, "allreduce");
            f->finish();
        }, true);
    }

    c10::intrusive_ptr<c10d::Work> allreduce_coalesced(
        std::vector<at::Tensor> &ts, const c10d::AllreduceCoalescedOptions &opts) override
    {
        std::vector<std::shared_ptr<Flat>> fs;
        std::vector<coll_op_t> ops;
        for (auto &t : ts) {
            check_cpu(t, "allreduce_coalesced");
            ops.push_back(to_coll_op(opts.reduceOp, t));
            to_coll_dtype(t);
            fs.push_back(std::make_shared<Flat>(t));
        }
        return enqueue(c10d::OpType::ALLREDUCE_COALESCED, ts, [this, fs, ops] {
            // One group: coll runs the all-reduces of the list as one operation.
            coll_group_start();
            for (size_t i = 0; i < fs.size(); i++) {
                auto &w = fs[i]->work;
                coll_allreduce(w.data_ptr(), w.data_ptr(), w.numel(), to_coll_dtype(w), ops[i],
                               comm_);
            }
            check_status(coll_group_end(), comm_, "allreduce_coalesced");
            for (auto &f : fs)
                f->finish();
        });
    }

    c10::intrusive_ptr<c10d::Work> reduce(std::vector<at::Tensor> &ts,
                                          const c10d::ReduceOptions &opts) override
    {
        check_one(ts, "reduce");
        TORCH_CHECK(opts.rootTensor == 0, "ProcessGroupColl: rootTensor must be 0");
        int root = check_rank(opts.rootRank, "root");
        coll_op_t op = to_coll_op(opts.reduceOp, ts[0]);
        auto f = std::make_shared<Flat>(ts[0]);
        return enqueue(c10d::OpType::REDUCE, ts, [this, f, op, root] {
            auto &w = f->work;
            check_status(coll_reduce(w.data_ptr(), w.data_ptr(), w.numel(), to_coll_dtype(w), op,
                                     root, comm_),
                         comm_, "reduce");
            f->finish();
        }, true);
    }

    c10::intrusive_ptr<c10d::Work> allgather(std::vector<std::vector<at::Tensor>> &outs,
                                             std::vector<at::Tensor> &ins,
                                             const c10d::AllgatherOptions &) override
    {
        check_one(ins, "allgather input");
        TORCH_CHECK(outs.size() == 1 && outs[0].size() == static_cast<size_t>(size_),
                    "ProcessGroupColl: allgather wants one list of ", size_, " output tensors");
        for (auto &o : outs[0]) {
            check_cpu(o, "allgather output");
            TORCH_CHECK(o.numel() == ins[0].numel() && o.scalar_type() == ins[0].scalar_type(),
                        "ProcessGroupColl: allgather outputs must match the input");
        }
        at::Tensor in = ins[0].contiguous();
        auto outputs = outs[0];
        return enqueue(c10d::OpType::ALLGATHER, outputs, [this, in, outputs] {
            at::Tensor flat = at::empty({static_cast<int64_t>(size_) * in.numel()}, in.options());
            check_status(coll_allgather(in.data_ptr(), flat.data_ptr(), nbytes(in), COLL_UINT8,
                                        comm_),
                         comm_, "allgather");
            for (int r = 0; r < size_; r++)
                outputs[r].copy_(flat.narrow(0, r * in.numel(), in.numel()).view_as(outputs[r]));
        });
    }

    // outs[r][i] = rank r's ins[i]: one all-gather of every input's bytes back to back.
    c10::intrusive_ptr<c10d::Work> allgather_coalesced(std::vector<std::vector<at::Tensor>> &outs,
                                                       std::vector<at::Tensor> &ins,
                                                       const c10d::AllgatherOptions &) override
    {
        TORCH_CHECK(outs.size() == static_cast<size_t>(size_),
                    "ProcessGroupColl: allgather_coalesced wants ", size_, " output lists");
        std::vector<at::Tensor> parts, outputs;
        for (auto &t : ins) {
            check_cpu(t, "allgather_coalesced input");
            parts.push_back(t.contiguous().reshape({-1}).view(at::kByte));
        }
        for (auto &l : outs) {
            TORCH_CHECK(l.size() == ins.size(), "ProcessGroupColl: allgather_coalesced: each "
                        "output list needs one tensor per input");
            for (size_t i = 0; i < l.size(); i++) {
                check_cpu(l[i], "allgather_coalesced output");
                TORCH_CHECK(l[i].numel() == ins[i].numel() &&
                                l[i].scalar_type() == ins[i].scalar_type(),
                            "ProcessGroupColl: allgather_coalesced outputs must match the inputs");
                outputs.push_back(l[i]);
            }
        }
        at::Tensor in = parts.empty() ? at::empty({0}, at::kByte) : at::cat(parts);
        size_t k = ins.size();
        return enqueue(c10d::OpType::ALLGATHER_COALESCED, outputs, [this, in, outputs, k] {
            size_t n = nbytes(in);
            at::Tensor flat = at::empty({static_cast<int64_t>(n) * size_}, at::kByte);
            check_status(coll_allgather(in.data_ptr(), flat.data_ptr(), n, COLL_UINT8, comm_),
                         comm_, "allgather_coalesced");
            for (int r = 0; r < size_; r++) {
                size_t off = r * n;
                for (size_t i = 0; i < k; i++) {
                    const at::Tensor &o = outputs[r * k + i];
                    o.copy_(from_bytes(flat.narrow(0, off, nbytes(o)), o));
                    off += nbytes(o);
                }
            }
        });
    }

    c10::intrusive_ptr<c10d::Work> _allgather_base(at::Tensor &out, at::Tensor &in,
                                                   const c10d::AllgatherOptions &) override
    {
        check_cpu(out, "_allgather_base output");
        check_cpu(in, "_allgather_base input");
        TORCH_CHECK(out.numel() == in.numel() * size_ && out.scalar_type() == in.scalar_type(),
                    "ProcessGroupColl: _allgather_base output must hold size x input");
        at::Tensor i = in.contiguous();
        auto f = std::make_shared<Flat>(out);
        return enqueue(c10d::OpType::_ALLGATHER_BASE, {out}, [this, f, i] {
            check_status(coll_allgather(i.data_ptr(), f->work.data_ptr(), nbytes(i), COLL_UINT8,
                                        comm_),
                         comm_, "_allgather_base");
            f->finish();
        });
    }

    c10::intrusive_ptr<c10d::Work> reduce_scatter(std::vector<at::Tensor> &outs,
                                                  std::vector<std::vector<at::Tensor>> &ins,
                                                  const c10d::ReduceScatterOptions &opts) override
    {
        check_one(outs, "reduce_scatter output");
        TORCH_CHECK(ins.size() == 1 && ins[0].size() == static_cast<size_t>(size_),
                    "ProcessGroupColl: reduce_scatter wants one list of ", size_, " inputs");
        for (auto &t : ins[0]) {
            check_cpu(t, "reduce_scatter input");
            TORCH_CHECK(t.numel() == outs[0].numel() && t.scalar_type() == outs[0].scalar_type(),
                        "ProcessGroupColl: reduce_scatter inputs must match the output");
        }
        coll_op_t op = to_coll_op(opts.reduceOp, outs[0]);
        std::vector<at::Tensor> flat_in;
        for (auto &t : ins[0])
            flat_in.push_back(t.reshape({-1}));
        at::Tensor in = at::cat(flat_in); // a copy, taken now: inputs are read at call time
        auto f = std::make_shared<Flat>(outs[0]);
        return enqueue(c10d::OpType::REDUCE_SCATTER, outs, [this, f, in, op] {
            auto &w = f->work;
            check_status(coll_reduce_scatter(in.data_ptr(), w.data_ptr(), w.numel(),
                                             to_coll_dtype(w), op, comm_),
                         comm_, "reduce_scatter");
            f->finish();
        });
    }

    c10::intrusive_ptr<c10d::Work> _reduce_scatter_base(
        at::Tensor &out, at::Tensor &in, const c10d::ReduceScatterOptions &opts) override
    {
        check_cpu(out, "_reduce_scatter_base output");
        check_cpu(in, "_reduce_scatter_base input");
        TORCH_CHECK(in.numel() == out.numel() * size_ && out.scalar_type() == in.scalar_type(),
                    "ProcessGroupColl: _reduce_scatter_base input must hold size x output");
        coll_op_t op = to_coll_op(opts.reduceOp, out);
        at::Tensor i = in.contiguous();
        auto f = std::make_shared<Flat>(out);
        return enqueue(c10d::OpType::_REDUCE_SCATTER_BASE, {out}, [this, f, i, op] {
            auto &w = f->work;
            check_status(coll_reduce_scatter(i.data_ptr(), w.data_ptr(), w.numel(),
                                             to_coll_dtype(w), op, comm_),
                         comm_, "_reduce_scatter_base");
            f->finish();
        });
    }

    c10::intrusive_ptr<c10d::Work> alltoall_base(at::Tensor &out, at::Tensor &in,
                                                 std::vector<int64_t> &out_splits,
                                                 std::vector<int64_t> &in_splits,
                                                 const c10d::AllToAllOptions &) override
    {
        check_cpu(out, "alltoall_base output");
        check_cpu(in, "alltoall_base input");
        TORCH_CHECK(out.scalar_type() == in.scalar_type(),
                    "ProcessGroupColl: alltoall_base tensors differ in type");
        // Splits count rows (dim 0); coll counts bytes here.
        int64_t es = in.element_size();
        int64_t in_row = es * (in.dim() ? in.numel() / std::max<int64_t>(in.size(0), 1) : 1);
        int64_t out_row = es * (out.dim() ? out.numel() / std::max<int64_t>(out.size(0), 1) : 1);
        auto counts = [this](const std::vector<int64_t> &splits, const at::Tensor &t,
                             int64_t row, const char *what) {
            std::vector<size_t> c(size_), d(size_);
            size_t off = 0;
            if (splits.empty()) {
                TORCH_CHECK(t.numel() % size_ == 0, "ProcessGroupColl: alltoall ", what,
                            " does not split evenly over ", size_, " ranks");
                std::fill(c.begin(), c.end(), nbytes(t) / size_);
            } else {
                TORCH_CHECK(splits.size() == static_cast<size_t>(size_),
                            "ProcessGroupColl: alltoall ", what, " splits need ", size_,
                            " entries");
                for (int r = 0; r < size_; r++) {
                    TORCH_CHECK(splits[r] >= 0, "ProcessGroupColl: negative split");
                    c[r] = static_cast<size_t>(splits[r] * row);
                }
            }
            for (int r = 0; r < size_; r++) {
                d[r] = off;
                off += c[r];
            }
            TORCH_CHECK(off <= nbytes(t), "ProcessGroupColl: alltoall ",
                        what, " splits exceed the tensor");
            return std::make_pair(c, d);
        };
        auto sc = counts(in_splits, in, in_row, "input");
        auto rc = counts(out_splits, out, out_row, "output");
        at::Tensor i = in.contiguous();
        auto f = std::make_shared<Flat>(out);
        return enqueue(c10d::OpType::ALLTOALL_BASE, {out}, [this, f, i, sc, rc] {
            check_status(coll_alltoallv(i.data_ptr(), sc.first.data(), sc.second.data(),
                                        f->work.data_ptr(), rc.first.data(), rc.second.data(),
                                        COLL_UINT8, comm_),
                         comm_, "alltoall");
            f->finish();
        });
    }

    c10::intrusive_ptr<c10d::Work> alltoall(std::vector<at::Tensor> &outs,
                                            std::vector<at::Tensor> &ins,
                                            const c10d::AllToAllOptions &) override
    {
        TORCH_CHECK(outs.size() == static_cast<size_t>(size_) &&
                        ins.size() == static_cast<size_t>(size_),
                    "ProcessGroupColl: alltoall wants ", size_, " input and output tensors");
        std::vector<size_t> sc(size_), sd(size_), rc(size_), rd(size_);
        size_t soff = 0, roff = 0;
        std::vector<at::Tensor> flat_in;
        for (int r = 0; r < size_; r++) {
            check_cpu(ins[r], "alltoall input");
            check_cpu(outs[r], "alltoall output");
            TORCH_CHECK(ins[r].scalar_type() == ins[0].scalar_type() &&
                            outs[r].scalar_type() == ins[0].scalar_type(),
                        "ProcessGroupColl: alltoall tensors differ in type");
            sc[r] = nbytes(ins[r]);
            sd[r] = soff;
            soff += sc[r];
            rc[r] = nbytes(outs[r]);
            rd[r] = roff;
            roff += rc[r];
            flat_in.push_back(ins[r].contiguous().reshape({-1}).view(at::kByte));
        }
        at::Tensor in = at::cat(flat_in);
        auto outputs = outs;
        int64_t total = static_cast<int64_t>(roff);
        return enqueue(c10d::OpType::ALLTOALL, outputs,
                       [this, in, outputs, sc, sd, rc, rd, total] {
            at::Tensor out = at::empty({total}, in.options());
            check_status(coll_alltoallv(in.data_ptr(), sc.data(), sd.data(), out.data_ptr(),
                                        rc.data(), rd.data(), COLL_UINT8, comm_),
                         comm_, "alltoall");
            for (int r = 0; r < size_; r++)
                outputs[r].copy_(from_bytes(out.narrow(0, rd[r], rc[r]), outputs[r]));
        });
    }

    // The data goes as it is (a copy of a non-contiguous tensor), so any dtype travels; the
    // receiver's tensor must hold as many bytes.
    c10::intrusive_ptr<c10d::Work> send(std::vector<at::Tensor> &ts, int dst, int tag) override
    {
        check_one(ts, "send");
        check_rank(dst, "dst");
        TORCH_CHECK(dst != rank_, "ProcessGroupColl: send to itself (rank ", rank_, ")");
        at::Tensor t = ts[0].contiguous();
        auto w = c10::make_intrusive<CollWork>(rank_, c10d::OpType::SEND, ts,
                                               std::function<void()>());
        {
            std::lock_guard<std::mutex> g(pm_);
            TORCH_CHECK(!p2p_stop_, "ProcessGroupColl: send after the group was destroyed");
            TORCH_CHECK(p2p_failed_.empty(), "ProcessGroupColl: send to rank ", dst,
                        ": the group failed before: ", p2p_failed_);
            sends_.push_back(SendJob{w, t, dst, tag});
        }
        pcv_.notify_all();
        return w;
    }

    c10::intrusive_ptr<c10d::Work> recv(std::vector<at::Tensor> &ts, int src, int tag) override
    {
        check_one(ts, "recv");
        check_rank(src, "src");
        TORCH_CHECK(src != rank_, "ProcessGroupColl: recv from itself (rank ", rank_, ")");
        return post_recv(ts, src, tag);
    }

    c10::intrusive_ptr<c10d::Work> recvAnysource(std::vector<at::Tensor> &ts, int tag) override
    {
        check_one(ts, "recv");
        return post_recv(ts, -1, tag);
    }

    c10::intrusive_ptr<c10d::Work> gather(std::vector<std::vector<at::Tensor>> &outs,
                                          std::vector<at::Tensor> &ins,
                                          const c10d::GatherOptions &opts) override
    {
        check_one(ins, "gather input");
        int root = check_rank(opts.rootRank, "root");
        at::Tensor in = ins[0].contiguous();
        std::vector<at::Tensor> outputs;
        if (rank_ == root) {
            TORCH_CHECK(outs.size() == 1 && outs[0].size() == static_cast<size_t>(size_),
                        "ProcessGroupColl: gather wants one list of ", size_,
                        " output tensors on the root");
            for (auto &o : outs[0]) {
                check_cpu(o, "gather output");
                TORCH_CHECK(o.numel() == in.numel() && o.scalar_type() == in.scalar_type(),
                            "ProcessGroupColl: gather outputs must match the input");
            }
            outputs = outs[0];
        } else {
            TORCH_CHECK(outs.empty() || (outs.size() == 1 && outs[0].empty()),
                        "ProcessGroupColl: gather takes output tensors on the root only");
        }
        return enqueue(c10d::OpType::GATHER, outputs, [this, in, outputs, root] {
            size_t n = nbytes(in);
            at::Tensor flat;
            if (rank_ == root)
                flat = at::empty({static_cast<int64_t>(n) * size_}, in.options().dtype(at::kByte));
            check_status(coll_gather(in.data_ptr(), rank_ == root ? flat.data_ptr() : nullptr, n,
                                     COLL_UINT8, root, comm_),
                         comm_, "gather");
            if (rank_ == root)
                for (int r = 0; r < size_; r++)
                    outputs[r].copy_(from_bytes(flat.narrow(0, r * n, n), outputs[r]));
        });
    }

    c10::intrusive_ptr<c10d::Work> scatter(std::vector<at::Tensor> &outs,
                                           std::vector<std::vector<at::Tensor>> &ins,
                                           const c10d::ScatterOptions &opts) override
    {
        check_one(outs, "scatter output");
        int root = check_rank(opts.rootRank, "root");
        at::Tensor flat; // the root's inputs, copied at call time
        if (rank_ == root) {
            TORCH_CHECK(ins.size() == 1 && ins[0].size() == static_cast<size_t>(size_),
                        "ProcessGroupColl: scatter wants one list of ", size_,
                        " input tensors on the root");
            std::vector<at::Tensor> parts;
            for (auto &t : ins[0]) {
                check_cpu(t, "scatter input");
                TORCH_CHECK(t.numel() == outs[0].numel() &&
                                t.scalar_type() == outs[0].scalar_type(),
                            "ProcessGroupColl: scatter inputs must match the output");
                parts.push_back(t.contiguous().view({-1}).view(at::kByte));
            }
            flat = at::cat(parts);
        } else {
            TORCH_CHECK(ins.empty() || (ins.size() == 1 && ins[0].empty()),
                        "ProcessGroupColl: scatter takes input tensors on the root only");
        }
        auto f = std::make_shared<Flat>(outs[0]);
        return enqueue(c10d::OpType::SCATTER, outs, [this, f, flat, root] {
            auto &w = f->work;
            check_status(coll_scatter(flat.defined() ? flat.data_ptr() : nullptr, w.data_ptr(),
                                      nbytes(w), COLL_UINT8, root, comm_),
                         comm_, "scatter");
            f->finish();
        });
    }

    // DDP's communication hook: the bucket through coll_allreduce_quantized (op AVG), with
    // one error-feedback state per bucket index (made again when the bucket's size changes,
    // as when DDP rebuilds its buckets after the first step).
    c10::intrusive_ptr<c10d::Work> allreduce_quantized(at::Tensor t, int codec, uint32_t block,
                                                       int64_t key, bool feedback)
    {
        check_cpu(t, "allreduce_quantized");
        TORCH_CHECK(t.is_contiguous(), "ProcessGroupColl: allreduce_quantized needs a "
                    "contiguous tensor (DDP's bucket buffers are)");
        TORCH_CHECK(codec >= 0 && codec < COLL_QUANT_NUM_CODECS,
                    "ProcessGroupColl: codec ", codec, " is not a coll_quant_codec_t");
        coll_dtype_t dt = to_coll_dtype(t);
        return enqueue(c10d::OpType::ALLREDUCE, {t}, [this, t, dt, codec, block, key, feedback] {
            coll_quant_config_t cfg = COLL_QUANT_CONFIG_INIT(static_cast<coll_quant_codec_t>(codec));
            cfg.block = block;
            coll_quant_feedback_t *fb = nullptr;
            size_t n = static_cast<size_t>(t.numel());
            if (feedback) {
                auto it = feedback_.find(key);
                if (it != feedback_.end() && it->second.first != n) {
                    coll_quant_feedback_destroy(it->second.second);
                    feedback_.erase(it);
                    it = feedback_.end();
                }
                if (it == feedback_.end()) {
                    check_status(coll_quant_feedback_create(comm_, n, &fb), comm_,
                                 "coll_quant_feedback_create");
                    feedback_[key] = {n, fb};
                } else {
                    fb = it->second.second;
                }
            }
            check_status(coll_allreduce_quantized(t.data_ptr(), t.data_ptr(), n, dt, COLL_AVG,
                                                  &cfg, fb, comm_),
                         comm_, "allreduce_quantized");
        });
    }

    // Payload bytes this rank's comm has sent, read in queue order (after everything issued
    // before). Channels (send/recv) are not counted.
    uint64_t bytes_sent()
    {
        auto out = std::make_shared<uint64_t>(0);
        auto w = enqueue(c10d::OpType::UNKNOWN, {}, [this, out] {
            check_status(coll_comm_bytes_sent(comm_, out.get()), comm_, "coll_comm_bytes_sent");
        });
        w->wait();
        return *out;
    }

    c10::intrusive_ptr<c10d::Work> barrier(const c10d::BarrierOptions &) override
    {
        return enqueue(c10d::OpType::BARRIER, {}, [this] {
            check_status(coll_barrier(comm_), comm_, "barrier");
        });
    }

  private:
    int check_rank(int64_t r, const char *what)
    {
        TORCH_CHECK(r >= 0 && r < size_, "ProcessGroupColl: ", what, " ", r,
                    " is out of range for ", size_, " ranks");
        return static_cast<int>(r);
    }

    // groupable: run is one coll call on contiguous tensors with nothing after it, so it can
    // be recorded inside a coll group (coalescing).
    c10::intrusive_ptr<c10d::Work> enqueue(c10d::OpType type, std::vector<at::Tensor> outputs,
                                           std::function<void()> run, bool groupable = false)
    {
        if (coalescing_) {
            TORCH_CHECK(groupable, "ProcessGroupColl: only broadcast, reduce and allreduce "
                        "can be coalesced (send and recv never wait for each other)");
            for (auto &t : outputs)
                TORCH_CHECK(t.is_contiguous(), "ProcessGroupColl: coalesced operations need "
                            "contiguous tensors");
        }
        auto w = c10::make_intrusive<CollWork>(rank_, type, std::move(outputs), std::move(run));
        if (coalescing_) {
            batch_.push_back(w);
            return w;
        }
        push(w);
        return w;
    }

    void push(c10::intrusive_ptr<CollWork> w)
    {
        {
            std::lock_guard<std::mutex> g(m_);
            queue_.push_back(std::move(w));
        }
        cv_.notify_one();
    }

  public:
    void startCoalescing() override
    {
        TORCH_CHECK(!coalescing_, "ProcessGroupColl: coalescing already started");
        coalescing_ = true;
    }

    // The batch runs as one coll group, so its sends and receives cannot deadlock whatever
    // their order; every Work of the batch completes with the group.
    void endCoalescing(std::vector<c10::intrusive_ptr<c10d::Work>> &reqs) override
    {
        TORCH_CHECK(coalescing_, "ProcessGroupColl: endCoalescing without startCoalescing");
        coalescing_ = false;
        auto batch = std::make_shared<std::vector<c10::intrusive_ptr<CollWork>>>(std::move(batch_));
        batch_.clear();
        if (batch->empty())
            return;
        for (auto &w : *batch)
            reqs.push_back(w);
        push(c10::make_intrusive<CollWork>(rank_, c10d::OpType::UNKNOWN,
                                           std::vector<at::Tensor>{}, [this, batch] {
            coll_group_start();
            for (auto &w : *batch)
                w->record();
            coll_status_t st = coll_group_end();
            for (auto &w : *batch)
                w->complete(st, comm_);
            check_status(st, comm_, "coalesced operations");
        }));
    }

  private:
    struct SendJob {
        c10::intrusive_ptr<CollWork> w;
        at::Tensor t;
        int dst, tag;
    };
    struct Posted {
        c10::intrusive_ptr<CollWork> w;
        std::shared_ptr<Flat> f;
        int src, tag; // src -1: any source
    };
    struct Unexpected {
        int src, tag;
        at::Tensor bytes;
    };

    // Rank root_rank of comm makes the id; the store carries it to the others.
    static void init_comm(const c10::intrusive_ptr<c10d::Store> &store, const std::string &key,
                          int root_rank, int rank, int size, coll_comm_t **comm)
    {
        coll_unique_id_t id;
        if (rank == root_rank) {
            check_status(coll_get_unique_id(&id), nullptr, "coll_get_unique_id");
            store->set(key, std::vector<uint8_t>(id.internal, id.internal + sizeof(id)));
        } else {
            get_id(store, key, &id);
        }
        check_status(coll_comm_init(comm, size, &id, rank), nullptr, "coll_comm_init");
    }

    static void get_id(const c10::intrusive_ptr<c10d::Store> &store, const std::string &key,
                       coll_unique_id_t *id)
    {
        auto bytes = store->get(key);
        TORCH_CHECK(bytes.size() == sizeof(*id), "ProcessGroupColl: the store's id has ",
                    bytes.size(), " bytes, not ", sizeof(*id));
        std::memcpy(id->internal, bytes.data(), sizeof(*id));
    }

    // One two-rank comm per ordered pair: rank 0 of "coll_p2p/a/b" is a, the sender. All
    // ids are posted before any is read, and the inits run in threads of their own, so no
    // order between pairs can deadlock. An idle channel waits without limit.
    void init_channels(const c10::intrusive_ptr<c10d::Store> &store)
    {
        out_.assign(size_, nullptr);
        in_.assign(size_, nullptr);
        reader_done_.assign(size_, false);
        if (size_ == 1)
            return;
        EnvOverride forever("COLL_TIMEOUT_MS", "0");
        auto key = [](int a, int b) {
            return "coll_p2p/" + std::to_string(a) + "/" + std::to_string(b);
        };
        std::vector<coll_unique_id_t> out_id(size_), in_id(size_);
        for (int r = 0; r < size_; r++) {
            if (r == rank_)
                continue;
            check_status(coll_get_unique_id(&out_id[r]), nullptr, "coll_get_unique_id");
            store->set(key(rank_, r), std::vector<uint8_t>(out_id[r].internal,
                                                            out_id[r].internal + sizeof(out_id[r])));
        }
        for (int r = 0; r < size_; r++)
            if (r != rank_)
                get_id(store, key(r, rank_), &in_id[r]);
        std::vector<coll_status_t> st(2 * size_, COLL_SUCCESS);
        std::vector<std::thread> ts;
        for (int r = 0; r < size_; r++) {
            if (r == rank_)
                continue;
            ts.emplace_back([&, r] { st[2 * r] = coll_comm_init(&out_[r], 2, &out_id[r], 0); });
            ts.emplace_back([&, r] { st[2 * r + 1] = coll_comm_init(&in_[r], 2, &in_id[r], 1); });
        }
        for (auto &t : ts)
            t.join();
        for (auto s : st)
            check_status(s, nullptr, "coll_comm_init (point-to-point channel)");
        for (int r = 0; r < size_; r++)
            if (r != rank_)
                readers_.emplace_back([this, r] { read_loop(r); });
        sender_ = std::thread([this] { send_loop(); });
    }

    void close_channels()
    {
        {
            std::lock_guard<std::mutex> g(pm_);
            p2p_stop_ = true;
        }
        pcv_.notify_all();
        if (sender_.joinable())
            sender_.join();
        // Each peer's sender ends with a closing header when its group goes; a peer that
        // does not close within a second (gone, or not destroying its group) has its
        // channel failed, which releases our reader.
        {
            std::unique_lock<std::mutex> g(pm_);
            pcv_.wait_for(g, std::chrono::seconds(1),
                          [this] { return readers_done_ == readers_.size(); });
        }
        for (int r = 0; r < static_cast<int>(in_.size()); r++)
            if (in_[r] && !reader_done_[r])
                coll_comm_abort(in_[r]);
        for (auto &t : readers_)
            t.join();
        readers_.clear();
        // All at once: a healthy channel's destroy waits (up to a second) for the peer to
        // destroy its end, and each peer goes through its own list in its own order, so
        // one after the other the waits would add up across the channels.
        std::vector<std::thread> ds;
        for (auto *c : in_)
            if (c)
                ds.emplace_back([c] { coll_comm_destroy(c); });
        for (auto *c : out_)
            if (c)
                ds.emplace_back([c] { coll_comm_destroy(c); });
        for (auto &t : ds)
            t.join();
        in_.clear();
        out_.clear();
        std::list<Posted> left;
        {
            std::lock_guard<std::mutex> g(pm_);
            left.swap(posted_);
        }
        for (auto &p : left)
            fail_work(p.w, "recv: the process group was destroyed first");
    }

    static void fail_work(const c10::intrusive_ptr<CollWork> &w, const std::string &msg)
    {
        try {
            TORCH_CHECK(false, "ProcessGroupColl: ", msg);
        } catch (...) {
            w->fail(std::current_exception());
        }
    }

    // The first (oldest) element of l from src (or any, where the element's src is -1)
    // with tag. Lock held.
    template <class L> static typename L::iterator match(L &l, int src, int tag)
    {
        for (auto it = l.begin(); it != l.end(); ++it)
            if ((it->src == -1 || src == -1 || it->src == src) && it->tag == tag)
                return it;
        return l.end();
    }

    c10::intrusive_ptr<c10d::Work> post_recv(std::vector<at::Tensor> &ts, int src, int tag)
    {
        auto f = std::make_shared<Flat>(ts[0]);
        auto w = c10::make_intrusive<CollWork>(rank_, src < 0 ? c10d::OpType::RECVANYSOURCE
                                                              : c10d::OpType::RECV,
                                               ts, std::function<void()>());
        Unexpected m;
        {
            std::lock_guard<std::mutex> g(pm_);
            TORCH_CHECK(!p2p_stop_, "ProcessGroupColl: recv after the group was destroyed");
            TORCH_CHECK(p2p_failed_.empty(), "ProcessGroupColl: recv: the group failed "
                        "before: ", p2p_failed_);
            auto it = match(unexpected_, src, tag);
            if (it == unexpected_.end()) {
                // Only the waiting caller's give-up withdraws it; tracked by identity.
                CollWork *id = w.get();
                posted_.push_back(Posted{w, f, src, tag});
                if (recv_limit_.count() > 0)
                    w->set_limit(recv_limit_, [this, id] {
                        std::lock_guard<std::mutex> g(pm_);
                        for (auto p = posted_.begin(); p != posted_.end(); ++p)
                            if (p->w.get() == id) {
                                posted_.erase(p);
                                return true;
                            }
                        return false;
                    });
                return w;
            }
            m = *it;
            unexpected_.erase(it);
        }
        deliver(Posted{w, f, src, tag}, m.src, m.bytes);
        return w;
    }

    // A message taken into bytes completes receive p (or fails it: sizes differ).
    static void deliver(const Posted &p, int src, const at::Tensor &bytes)
    {
        size_t want = nbytes(p.f->work);
        if (static_cast<size_t>(bytes.numel()) != want) {
            fail_work(p.w, "recv: the message from rank " + std::to_string(src) + " (tag " +
                               std::to_string(p.tag) + ") has " + std::to_string(bytes.numel()) +
                               " bytes, the tensor " + std::to_string(want));
            return;
        }
        try {
            p.f->work.copy_(from_bytes(bytes, p.f->work));
            p.f->finish();
        } catch (...) {
            p.w->fail(std::current_exception());
            return;
        }
        p.w->set_source(src);
        p.w->succeed();
    }

    // Everything rank src sends us, in its order.
    void read_loop(int src)
    {
        coll_comm_t *c = in_[src];
        bool closed = false;
        for (;;) {
            P2pHeader h;
            coll_status_t st = coll_recv(&h, sizeof(h), COLL_UINT8, 0, c);
            if (st != COLL_SUCCESS || h.magic != kP2pMagic || h.bytes < 0) {
                closed = st == COLL_SUCCESS && h.magic == kP2pMagic;
                break;
            }
            c10::optional<Posted> p;
            {
                std::lock_guard<std::mutex> g(pm_);
                auto it = match(posted_, src, static_cast<int>(h.tag));
                if (it != posted_.end() &&
                    nbytes(it->f->work) == static_cast<size_t>(h.bytes)) {
                    p = *it;
                    posted_.erase(it);
                }
            }
            if (p) { // straight into the receiver's tensor
                if (h.bytes)
                    st = coll_recv(p->f->work.data_ptr(), h.bytes, COLL_UINT8, 0, c);
                if (st != COLL_SUCCESS) {
                    fail_work(p->w, std::string("recv: ") + coll_status_string(st) + ": " +
                                        coll_last_error(c));
                    break;
                }
                p->f->finish();
                p->w->set_source(src);
                p->w->succeed();
                continue;
            }
            at::Tensor bytes = at::empty({h.bytes}, at::kByte);
            if (h.bytes && coll_recv(bytes.data_ptr(), h.bytes, COLL_UINT8, 0, c) != COLL_SUCCESS)
                break;
            {
                std::lock_guard<std::mutex> g(pm_);
                auto it = match(posted_, src, static_cast<int>(h.tag));
                if (it == posted_.end()) {
                    unexpected_.push_back(Unexpected{src, static_cast<int>(h.tag), bytes});
                    continue;
                }
                p = *it;
                posted_.erase(it);
            }
            deliver(*p, src, bytes);
        }
        // The channel is gone. Closed (the peer destroyed its group) or ended by our own
        // shutdown: receives that can only be matched from src fail now. Failed while the
        // group is live (the peer died): the group is broken, as its comm is, so every
        // posted receive fails, whatever its source (one from any rank included, which
        // would otherwise wait for the group's timeout), and so does every later send
        // and receive.
        std::string why = "the channel from rank " + std::to_string(src) +
                          (closed ? std::string(" was closed (its group was destroyed)")
                                  : std::string(" failed (on the channel's two-rank comm, "
                                                "that rank is rank 0 and this one rank 1): ") +
                                        coll_last_error(c));
        std::list<Posted> dead;
        {
            std::lock_guard<std::mutex> g(pm_);
            bool broken = !closed && !p2p_stop_;
            if (broken && p2p_failed_.empty())
                p2p_failed_ = why;
            for (auto it = posted_.begin(); it != posted_.end();) {
                if (broken || it->src == src) {
                    dead.push_back(*it);
                    it = posted_.erase(it);
                } else {
                    ++it;
                }
            }
        }
        for (auto &p : dead)
            fail_work(p.w, "recv: " + why);
        {
            std::lock_guard<std::mutex> g(pm_);
            reader_done_[src] = true;
            readers_done_++;
        }
        pcv_.notify_all();
    }

    void send_loop()
    {
        for (;;) {
            SendJob j;
            {
                std::unique_lock<std::mutex> g(pm_);
                pcv_.wait(g, [this] { return p2p_stop_ || !sends_.empty(); });
                if (sends_.empty())
                    break;
                j = sends_.front();
                sends_.pop_front();
            }
            coll_comm_t *c = out_[j.dst];
            P2pHeader h{kP2pMagic, j.tag, static_cast<int64_t>(nbytes(j.t))};
            coll_status_t st = coll_send(&h, sizeof(h), COLL_UINT8, 1, c);
            if (st == COLL_SUCCESS && h.bytes)
                st = coll_send(j.t.data_ptr(), h.bytes, COLL_UINT8, 1, c);
            if (st == COLL_SUCCESS)
                j.w->succeed();
            else
                fail_work(j.w, std::string("send to rank ") + std::to_string(j.dst) + ": " +
                                   coll_status_string(st) + ": " + coll_last_error(c));
        }
        P2pHeader bye{kP2pMagic, 0, -1};
        for (auto *c : out_)
            if (c)
                (void)coll_send(&bye, sizeof(bye), COLL_UINT8, 1, c); // a gone peer: nothing to tell
    }

    void loop()
    {
        for (;;) {
            c10::intrusive_ptr<CollWork> w;
            {
                std::unique_lock<std::mutex> g(m_);
                cv_.wait(g, [this] { return stop_ || !queue_.empty(); });
                if (queue_.empty())
                    return; // stop_, and nothing left: queued work always runs first
                w = queue_.front();
                queue_.pop_front();
            }
            w->execute();
        }
    }

    coll_comm_t *comm_ = nullptr;
    std::mutex m_;
    std::condition_variable cv_;
    std::deque<c10::intrusive_ptr<CollWork>> queue_;
    bool stop_ = false;
    bool coalescing_ = false; // set and read by the calling thread only
    std::vector<c10::intrusive_ptr<CollWork>> batch_;
    std::thread worker_;
    std::map<int64_t, std::pair<size_t, coll_quant_feedback_t *>> feedback_; // worker only
    std::chrono::milliseconds recv_limit_{0};

    // Point to point (the channels): pm_ guards the queues and lists below.
    std::vector<coll_comm_t *> out_, in_; // out_[r]: to r; in_[r]: from r
    std::vector<std::thread> readers_;
    std::vector<bool> reader_done_; // by source rank
    size_t readers_done_ = 0;
    std::thread sender_;
    std::mutex pm_;
    std::condition_variable pcv_;
    std::deque<SendJob> sends_;
    std::list<Posted> posted_;
    std::list<Unexpected> unexpected_;
    bool p2p_stop_ = false;
    std::string p2p_failed_; // a channel's failure while live: the first one's message
};

c10::intrusive_ptr<c10d::ProcessGroup> create(const c10::intrusive_ptr<c10d::Store> &store,
                                              int rank, int size,
                                              const std::chrono::duration<float> &timeout)
{
    auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(timeout);
    return c10::make_intrusive<ProcessGroupColl>(store, rank, size, ms);
}

ProcessGroupColl &as_coll(const c10::intrusive_ptr<c10d::ProcessGroup> &pg)
{
    auto *p = dynamic_cast<ProcessGroupColl *>(pg.get());
    TORCH_CHECK(p, "coll_torch: the process group is ", pg->getBackendName(), ", not coll");
    return *p;
}

} // namespace

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m)
{
    m.doc() = "coll's torch.distributed process group; see coll_torch/__init__.py";
    m.def("create", &create, py::arg("store"), py::arg("rank"), py::arg("size"),
          py::arg("timeout"), py::call_guard<py::gil_scoped_release>());
    m.def("allreduce_quantized",
          [](const c10::intrusive_ptr<c10d::ProcessGroup> &pg, at::Tensor t, int codec,
             uint32_t block, int64_t key, bool feedback) {
              return as_coll(pg).allreduce_quantized(t, codec, block, key, feedback);
          },
          py::arg("pg"), py::arg("tensor"), py::arg("codec"), py::arg("block"), py::arg("key"),
          py::arg("feedback"), py::call_guard<py::gil_scoped_release>());
    m.def("bytes_sent",
          [](const c10::intrusive_ptr<c10d::ProcessGroup> &pg) {
              return as_coll(pg).bytes_sent();
          },
          py::arg("pg"), py::call_guard<py::gil_scoped_release>());
    m.def("timeout_ms",
          [](const c10::intrusive_ptr<c10d::ProcessGroup> &pg) {
              return static_cast<int64_t>(as_coll(pg).timeout_ms().count());
          },
          py::arg("pg"));
}
