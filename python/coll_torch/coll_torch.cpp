// coll_torch.cpp - a torch.distributed process group ("coll") over coll's native API.
//
// Each ProcessGroupColl owns one coll communicator and one worker thread. A collective call
// from Python checks its tensors, queues the operation and returns a Work at once; the
// worker runs the queue in order with coll's blocking calls, then completes the Work and its
// Future. So the comm is only ever touched by one thread (coll's rule: one thread per comm),
// operations keep the order they were issued in on every rank (the order coll matches
// messages by), and autograd threads that issue DDP's all-reduces never block on the wire.
//
// CPU tensors only: coll's host path. A non-contiguous tensor is worked on through a
// contiguous copy that is written back when the operation completes.
#include <torch/extension.h>

#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>
#include <torch/csrc/distributed/c10d/Store.hpp>
#include <torch/csrc/distributed/c10d/Types.hpp>
#include <torch/csrc/distributed/c10d/Work.hpp>

#include <pybind11/chrono.h>

#include <condition_variable>
#include <deque>
#include <functional>
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
    case c10d::ReduceOp::AVG: return COLL_AVG;
    default:
        TORCH_CHECK(false, "ProcessGroupColl: reduce op ", static_cast<int>(op),
                    " is not supported (SUM, PRODUCT, MIN, MAX, AVG are)");
    }
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

    // The future first: whoever wait() releases may look at it at once.
    void succeed()
    {
        future_->markCompleted(c10::IValue(outputs_));
        finish();
    }

    void fail(std::exception_ptr e)
    {
        future_->setError(e);
        finish(e);
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

  private:
    std::vector<at::Tensor> outputs_;
    std::function<void()> run_;
    c10::intrusive_ptr<c10::ivalue::Future> future_;
};

class ProcessGroupColl : public c10d::ProcessGroup {
  public:
    ProcessGroupColl(const c10::intrusive_ptr<c10d::Store> &store, int rank, int size)
        : c10d::ProcessGroup(rank, size)
    {
        // Rank 0 makes the id (and runs coll's bootstrap root); the job's store carries it.
        static const std::string key = "coll_unique_id";
        coll_unique_id_t id;
        if (rank == 0) {
            check_status(coll_get_unique_id(&id), nullptr, "coll_get_unique_id");
            store->set(key, std::vector<uint8_t>(id.internal, id.internal + sizeof(id)));
        } else {
            auto bytes = store->get(key);
            TORCH_CHECK(bytes.size() == sizeof(id), "ProcessGroupColl: the store's id has ",
                        bytes.size(), " bytes, not ", sizeof(id));
            std::memcpy(id.internal, bytes.data(), sizeof(id));
        }
        check_status(coll_comm_init(&comm_, size, &id, rank), nullptr, "coll_comm_init");
        worker_ = std::thread([this] { loop(); });
    }

    ~ProcessGroupColl() override
    {
        {
            std::lock_guard<std::mutex> g(m_);
            stop_ = true;
        }
        cv_.notify_all();
        worker_.join();
        coll_comm_destroy(comm_);
    }

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
            check_status(coll_broadcast(w.data_ptr(), w.data_ptr(), w.numel(), to_coll_dtype(w),
                                        root, comm_),
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
            check_status(coll_allgather(in.data_ptr(), flat.data_ptr(), in.numel(),
                                        to_coll_dtype(in), comm_),
                         comm_, "allgather");
            for (int r = 0; r < size_; r++)
                outputs[r].copy_(flat.narrow(0, r * in.numel(), in.numel()).view_as(outputs[r]));
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
            check_status(coll_allgather(i.data_ptr(), f->work.data_ptr(), i.numel(),
                                        to_coll_dtype(i), comm_),
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
        // Splits count rows (dim 0); coll counts elements.
        int64_t in_row = in.dim() ? in.numel() / std::max<int64_t>(in.size(0), 1) : 1;
        int64_t out_row = out.dim() ? out.numel() / std::max<int64_t>(out.size(0), 1) : 1;
        auto counts = [this](const std::vector<int64_t> &splits, const at::Tensor &t,
                             int64_t row, const char *what) {
            std::vector<size_t> c(size_), d(size_);
            size_t off = 0;
            if (splits.empty()) {
                TORCH_CHECK(t.numel() % size_ == 0, "ProcessGroupColl: alltoall ", what,
                            " does not split evenly over ", size_, " ranks");
                std::fill(c.begin(), c.end(), static_cast<size_t>(t.numel() / size_));
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
            TORCH_CHECK(off <= static_cast<size_t>(t.numel()), "ProcessGroupColl: alltoall ",
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
                                        to_coll_dtype(i), comm_),
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
            sc[r] = ins[r].numel();
            sd[r] = soff;
            soff += sc[r];
            rc[r] = outs[r].numel();
            rd[r] = roff;
            roff += rc[r];
            flat_in.push_back(ins[r].reshape({-1}));
        }
        at::Tensor in = at::cat(flat_in);
        auto outputs = outs;
        int64_t total = static_cast<int64_t>(roff);
        return enqueue(c10d::OpType::ALLTOALL, outputs,
                       [this, in, outputs, sc, sd, rc, rd, total] {
            at::Tensor out = at::empty({total}, in.options());
            check_status(coll_alltoallv(in.data_ptr(), sc.data(), sd.data(), out.data_ptr(),
                                        rc.data(), rd.data(), to_coll_dtype(in), comm_),
                         comm_, "alltoall");
            for (int r = 0; r < size_; r++)
                outputs[r].copy_(out.narrow(0, rd[r], rc[r]).view_as(outputs[r]));
        });
    }

    c10::intrusive_ptr<c10d::Work> send(std::vector<at::Tensor> &ts, int dst, int tag) override
    {
        check_one(ts, "send");
        check_rank(dst, "dst");
        (void)tag; // coll pairs sends and receives by order per peer, as NCCL does
        at::Tensor t = ts[0].contiguous();
        return enqueue(c10d::OpType::SEND, ts, [this, t, dst] {
            check_status(coll_send(t.data_ptr(), t.numel(), to_coll_dtype(t), dst, comm_), comm_,
                         "send");
        }, true);
    }

    c10::intrusive_ptr<c10d::Work> recv(std::vector<at::Tensor> &ts, int src, int tag) override
    {
        check_one(ts, "recv");
        check_rank(src, "src");
        (void)tag;
        auto f = std::make_shared<Flat>(ts[0]);
        return enqueue(c10d::OpType::RECV, ts, [this, f, src] {
            auto &w = f->work;
            check_status(coll_recv(w.data_ptr(), w.numel(), to_coll_dtype(w), src, comm_), comm_,
                         "recv");
            f->finish();
        }, true);
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
    // be recorded inside a coll group (batch_isend_irecv's coalescing).
    c10::intrusive_ptr<c10d::Work> enqueue(c10d::OpType type, std::vector<at::Tensor> outputs,
                                           std::function<void()> run, bool groupable = false)
    {
        if (coalescing_) {
            TORCH_CHECK(groupable, "ProcessGroupColl: only send, recv, broadcast, reduce and "
                        "allreduce can be coalesced");
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
};

c10::intrusive_ptr<c10d::ProcessGroup> create(const c10::intrusive_ptr<c10d::Store> &store,
                                              int rank, int size,
                                              const std::chrono::duration<float> &timeout)
{
    (void)timeout; // coll's own COLL_TIMEOUT_MS bounds every wait
    return c10::make_intrusive<ProcessGroupColl>(store, rank, size);
}

} // namespace

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m)
{
    m.doc() = "coll's torch.distributed process group; see coll_torch/__init__.py";
    m.def("create", &create, py::arg("store"), py::arg("rank"), py::arg("size"),
          py::arg("timeout"), py::call_guard<py::gil_scoped_release>());
}
