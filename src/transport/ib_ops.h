/*
 * ib_ops.h - every verbs call the ib transport makes, as one table of function pointers.
 *
 * The real table (src/transport/ib.c) calls libibverbs; several of those calls are static
 * inline in <infiniband/verbs.h> and dispatch through the context's provider ops, so the
 * table sits at the level the transport calls, not at the level of the library's exports.
 * tests/fakeverbs implements the same table without hardware; COLL_IB_FAKE names the shared
 * object that holds it (the transport loads it at run time, so one build serves both).
 *
 * Types are libibverbs' own: the fake allocates the public structs (ibv_context, ibv_qp,
 * ...) inside its own objects and fills the fields a caller may read (qp_num, lkey, rkey,
 * cq->channel, channel->fd).
 */
#ifndef COLL_IB_OPS_H
#define COLL_IB_OPS_H

#include <infiniband/verbs.h>

struct coll_ib_ops {
    const char *name; /* "libibverbs" or "fakeverbs" */
    struct ibv_device **(*get_device_list)(int *num_devices);
    void (*free_device_list)(struct ibv_device **list);
    const char *(*get_device_name)(struct ibv_device *device);
    struct ibv_context *(*open_device)(struct ibv_device *device);
    int (*close_device)(struct ibv_context *context);
    int (*query_device)(struct ibv_context *context, struct ibv_device_attr *attr);
    int (*query_port)(struct ibv_context *context, uint8_t port, struct ibv_port_attr *attr);
    int (*query_gid)(struct ibv_context *context, uint8_t port, int index, union ibv_gid *gid);
    struct ibv_pd *(*alloc_pd)(struct ibv_context *context);
    int (*dealloc_pd)(struct ibv_pd *pd);
    struct ibv_mr *(*reg_mr)(struct ibv_pd *pd, void *addr, size_t length, int access);
    int (*dereg_mr)(struct ibv_mr *mr);
    struct ibv_comp_channel *(*create_comp_channel)(struct ibv_context *context);
    int (*destroy_comp_channel)(struct ibv_comp_channel *channel);
    struct ibv_cq *(*create_cq)(struct ibv_context *context, int cqe, void *cq_context,
                                struct ibv_comp_channel *channel, int comp_vector);
    int (*destroy_cq)(struct ibv_cq *cq);
    int (*req_notify_cq)(struct ibv_cq *cq, int solicited_only);
    int (*get_cq_event)(struct ibv_comp_channel *channel, struct ibv_cq **cq_p, void **ctx_p);
    void (*ack_cq_events)(struct ibv_cq *cq, unsigned int nevents);
    int (*poll_cq)(struct ibv_cq *cq, int num_entries, struct ibv_wc *wc);
    struct ibv_qp *(*create_qp)(struct ibv_pd *pd, struct ibv_qp_init_attr *attr);
    int (*modify_qp)(struct ibv_qp *qp, struct ibv_qp_attr *attr, int attr_mask);
    int (*destroy_qp)(struct ibv_qp *qp);
    int (*post_send)(struct ibv_qp *qp, struct ibv_send_wr *wr, struct ibv_send_wr **bad_wr);
    int (*post_recv)(struct ibv_qp *qp, struct ibv_recv_wr *wr, struct ibv_recv_wr **bad_wr);
    struct ibv_ah *(*create_ah)(struct ibv_pd *pd, struct ibv_ah_attr *attr);
    int (*destroy_ah)(struct ibv_ah *ah);
    /* Objects still allocated (fake only, NULL for the real library): the leak count. */
    long (*live_objects)(void);
};

/* The symbol a fake provider exports (tests/fakeverbs/fakeverbs.c). */
#define COLL_IB_FAKE_SYMBOL "coll_fakeverbs_ops"
typedef const struct coll_ib_ops *(*coll_ib_fake_entry_fn)(void);

#endif /* COLL_IB_OPS_H */
