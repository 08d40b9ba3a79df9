/*
 * dptrain - a thin data-parallel trainer on coll's public API: an MLP on Fashion-MNIST (or a
 * synthetic dataset), trained as PyTorch's DistributedDataParallel trains.
 *
 *   collrun -n 4 dptrain [--data DIR | --synthetic N] [--sizes 784,256,128,10]
 *       [--optim sgd|adamw] [--lr X] [--batch B] [--accum K] [--epochs E | --steps S] ...
 *
 * (dptrain --help lists every option.) Without collrun it runs as one process.
 *
 * What makes it data-parallel:
 *   - rank 0 initializes the weights and broadcasts them, so every replica starts equal;
 *   - the sampler shuffles with a seed all ranks share, and each rank takes its slice of
 *     every global batch (data.h);
 *   - each rank scales its gradient by 1 / (global batch), so the SUM all-reduce yields the
 *     global mean exactly, even when the batch does not divide evenly among the ranks;
 *   - gradients go in buckets of whole layers (--bucket-mb, 25 MB by default as DDP's); the
 *     backward pass runs last layer first and launches a bucket's coll_iallreduce as soon as
 *     its lowest layer is done, then goes on computing the layers below while it travels;
 *     all buckets are waited for before the optimizer step;
 *   - with --accum K only every K-th micro-batch's backward launches all-reduces; the others
 *     just accumulate locally (DDP's no_sync()).
 * Since every replica applies the same averaged gradient, the replicas stay equal, and the
 * run matches one process on the same global batch up to float summation order.
 *
 * Instead of DDP, --diloco H runs DiLoCo and, with --fragments/--overlap/--mix, Streaming
 * DiLoCo; --quant sends gradients or outer gradients through coll_allreduce_quantized on a
 * worker thread (qworker.h), overlapped as the fp32 all-reduces are.
 *
 * This file is the training loop; dptrain.h lists the other parts and what each holds.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "dptrain.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---------------------------------------------------------------------------------------
 * The training loop and main.
 */
int main(int argc, char **argv)
{
    struct opts o;
    struct run r = {.rank = 0, .nranks = 1};
    struct mlp m = {0};
    struct optim opt = {0};
    struct dataset train = {0}, test = {0};
    struct ddp d = {0};
    struct history hist = {0};
    struct diloco dl = {0};
    struct qworker qw = {0};
    struct dp_rng rng;
    char err[ERRLEN];
    uint32_t *perm = NULL;
    float *xb = NULL;
    uint8_t *yb = NULL;
    long steps_per_epoch, total_steps, start_step = 0;
    int perm_epoch = -1, ret = 1;
    double tot_compute = 0, tot_comm = 0, tot_wait = 0, run_t0, epoch_t0, epoch_time_sum = 0;
    int epochs_timed = 0;
    double acc = 0, test_loss = 0;
    FILE *metrics = NULL;
    coll_status_t st;
    struct el el = {.dir = {.live_fd = -1}};
    long step, acc_step = -1;

    if (parse_opts(argc, argv, &o) != 0)
        return EXIT_USAGE;
    r.o = &o;
    if (mlp_parse_sizes(&m, o.sizes, err, sizeof(err)) != 0) {
        fprintf(stderr, "dptrain: %s\n", err);
        return EXIT_USAGE;
    }
    if (o.schedule) { /* no data, no ranks: just the fragments and their turns */
        if (mlp_init(&m, 1, err, sizeof(err)) != 0 || diloco_init(&dl, &m, &o, err,
                                                                  sizeof(err)) != 0) {
            fprintf(stderr, "dptrain: %s\n", err);
            ret = 1;
        } else {
            diloco_print_schedule(&dl, &o, m.nparams);
            ret = 0;
        }
        diloco_free(&dl);
        mlp_free(&m);
        return ret;
    }

    if (o.elastic) {
        /* Recoveries and grows bootstrap while the job waits: a member or joiner that
         * never comes must cost seconds, not the default minutes. */
        setenv("COLL_BOOTSTRAP_TIMEOUT_MS", "5000", 0);
        r.elastic = true;
        if (elastic_open(&el.dir, o.elastic, err, sizeof(err)) != 0 ||
            el_form(&r, &el, &o, err, sizeof(err)) != 0) {
            fprintf(stderr, "dptrain: %s\n", err);
            elastic_close(&el.dir);
            return 1;
        }
        el.need_sync = true;
    } else if (getenv("COLL_UNIQUE_ID")) {
        st = coll_comm_init_env(&r.comm);
        if (st != COLL_SUCCESS) {
            fprintf(stderr, "dptrain: coll_comm_init_env failed: %s: %s\n",
                    coll_status_string(st), coll_last_error(NULL));
            return 1;
        }
        coll_comm_rank(r.comm, &r.rank);
        coll_comm_size(r.comm, &r.nranks);
        if (check_flags(&r, &o, err, sizeof(err)) != 0) {
            fprintf(stderr, "dptrain: rank %d: %s\n", r.rank, err);
            goto out_comm;
        }
    }
    if (o.batch < r.nranks) {
        fprintf(stderr, "dptrain: --batch %d is smaller than the %d ranks: every rank needs a "
                "sample per micro-batch\n", o.batch, r.nranks);
        ret = EXIT_USAGE;
        goto out_comm;
    }

    /* Data: every rank holds the whole set and reads only its slices (it is small). */
    if (o.synthetic) {
        if (dataset_synthetic(&train, o.synthetic, m.sizes[0], m.sizes[m.nlayers], o.seed,
                              err, sizeof(err)) != 0 ||
            dataset_synthetic(&test, o.synthetic / 4 + 1, m.sizes[0], m.sizes[m.nlayers],
                              o.seed + 0x7e57, err, sizeof(err)) != 0)
            goto out_err;
    } else if (dataset_load_idx(&train, o.data_dir, 0, m.sizes[0], m.sizes[m.nlayers], err,
                                sizeof(err)) != 0 ||
               dataset_load_idx(&test, o.data_dir, 1, m.sizes[0], m.sizes[m.nlayers], err,
                                sizeof(err)) != 0) {
        /* a first run most often has no dataset at all: say how to get one */
        if (strncmp(err, "cannot open dataset file", 24) == 0) {
            size_t l = strlen(err);
            snprintf(err + l, sizeof(err) - l,
                     "\n  install Fashion-MNIST (apt-get install dataset-fashion-mnist puts it "
                     "in " DEFAULT_DATA "),\n  point --data DIR at a directory of its IDX "
                     "files, or train on --synthetic N generated samples");
        }
        goto out_err;
    }
    steps_per_epoch = train.n / ((long)o.batch * o.accum);
    if (steps_per_epoch < 1) {
        snprintf(err, sizeof(err), "the training set (%d samples) is smaller than one step "
                 "(batch %d x accum %d)", train.n, o.batch, o.accum);
        goto out_err;
    }
    total_steps = o.steps ? o.steps : steps_per_epoch * o.epochs;

    /* The micro-batch buffer holds a rank's slice, or an evaluation chunk; elastic: the
     * slice of a comm shrunk to one rank. */
    int cap_ranks = o.elastic ? 1 : r.nranks;
    if (mlp_init(&m, o.batch / cap_ranks + 1 > 256 ? o.batch / cap_ranks + 1 : 256, err,
                 sizeof(err)) != 0)
        goto out_err;
    opt = (struct optim){
        .kind = o.optim, .lr = o.lr, .momentum = o.momentum, .beta1 = o.beta1,
        .beta2 = o.beta2, .eps = o.eps, .weight_decay = o.weight_decay,
    };
    if (optim_init(&opt, m.nparams, err, sizeof(err)) != 0)
        goto out_err;
    perm = malloc((size_t)train.n * sizeof(*perm));
    xb = malloc((size_t)m.cap * m.sizes[0] * sizeof(float));
    yb = malloc((size_t)m.cap);
    if (!perm || !xb || !yb) {
        snprintf(err, sizeof(err), "out of memory");
        goto out_err;
    }

    d = (struct ddp){.run = &r, .m = &m};
    ddp_make_buckets(&d, o.bucket_mb);
    if (o.diloco && diloco_init(&dl, &m, &o, err, sizeof(err)) != 0)
        goto out_err;
    if (o.quant >= 0 && r.comm) {
        if (qworker_init(&qw, r.comm, (coll_quant_codec_t)o.quant, err, sizeof(err)) != 0)
            goto out_err;
        r.qw = &qw;
        for (int k = 0; o.feedback && !o.diloco && k < d.nbuckets; k++)
            if (qworker_feedback(&qw, d.b[k].count, &d.b[k].fb, err, sizeof(err)) != 0)
                goto out_err;
        for (int f = 0; o.feedback && o.diloco && f < dl.nfrag; f++)
            if (qworker_feedback(&qw, dl.frag_off[f + 1] - dl.frag_off[f], &dl.fb[f], err,
                                 sizeof(err)) != 0)
                goto out_err;
        if (qworker_start(&qw, err, sizeof(err)) != 0)
            goto out_err;
    }

    dp_rng_seed(&rng, o.seed);
    if (o.resume) {
        /* Every rank reads the file (it is on a shared or local filesystem) and checks it,
         * so a rank with a bad copy fails loudly instead of diverging. */
        struct ckpt_header got;
        if (load_checkpoint(&r, &o, &m, &opt, &dl, &got, err, sizeof(err)) != 0)
            goto out_err;
        start_step = (long)got.step;
        if (start_step >= total_steps) {
            snprintf(err, sizeof(err), "checkpoint '%s' is at step %ld: nothing left to do "
                     "for a run of %ld steps (raise --steps or --epochs)", o.resume,
                     start_step, total_steps);
            goto out_err;
        }
        opt.t = got.optim_t;
        rng.s = got.rng_state;
        if (got.seed != o.seed || got.batch != (uint32_t)o.batch ||
            got.accum != (uint32_t)o.accum)
            if (r.rank == 0)
                fprintf(stderr, "dptrain: note: checkpoint had seed %llu batch %u accum %u; "
                        "continuing with this run's settings\n",
                        (unsigned long long)got.seed, got.batch, got.accum);
    } else {
        if (r.rank == 0)
            mlp_init_weights(&m, dp_rng_next(&rng));
        else
            dp_rng_next(&rng); /* keep every rank's generator in the same state */
        if (!o.elastic) /* elastic: the first sync broadcasts everything */
            broadcast_floats(&r, m.params, m.nparams);
        if (o.diloco)
            memcpy(dl.global, m.params, m.nparams * sizeof(float));
    }
    step = start_step;
    if (o.elastic) {
        /* the first members' state: rank 0's (or the checkpoint's); a joiner has none */
        el.have_state = el.have_state && (r.rank == 0 || o.resume);
        while (el_sync(&r, &el, &o, &m, &opt, &dl, &step, err, sizeof(err)) != 0)
            el_recover(&r, &el);
    }

    if (r.rank == 0) {
        printf("dptrain: %d rank(s), model %s (%zu parameters, %.2f MB), %s lr %g, global "
               "batch %d x accum %d, %ld steps/epoch, %d bucket(s) of <= %g MB, %s\n",
               r.nranks, o.sizes, m.nparams, m.nparams * 4 / 1e6,
               o.optim == OPTIM_ADAMW ? "adamw" : "sgd", o.lr, o.batch, o.accum,
               steps_per_epoch, d.nbuckets, o.bucket_mb,
               o.synthetic ? "synthetic data" : o.data_dir);
        if (o.diloco)
            printf("dptrain: DiLoCo: %d inner steps per sync, %d fragment(s), outer Nesterov "
                   "lr %g momentum %g (no gradient all-reduce), %s\n", o.diloco, dl.nfrag,
                   o.outer_lr, o.outer_momentum,
                   o.overlap < 0 ? "blocking syncs" : "overlapped syncs");
        if (o.diloco && o.overlap >= 0)
            printf("dptrain: overlap: outer step lands %d inner step(s) after its all-reduce "
                   "starts, mixing factor alpha %g\n", o.overlap, o.mix);
        if (o.quant >= 0)
            printf("dptrain: %s cross the wire as %s, %s error feedback%s\n",
                   o.diloco ? "outer gradients" : "gradients", qworker_codec_name(o.quant),
                   o.feedback ? "with" : "without", r.comm ? "" : " (alone: no effect)");
        if (o.diloco && o.optim == OPTIM_SGD)
            printf("dptrain: note: DiLoCo's inner optimizer is AdamW (--optim adamw); this "
                   "run's is sgd%s\n", o.optim_set ? "" : ", the default");
        if (start_step)
            printf("dptrain: resumed from '%s' at step %ld\n", o.resume, start_step);
        if (start_step && o.quant >= 0 && o.feedback && r.comm)
            printf("dptrain: note: error feedback starts again from zero residuals (the "
                   "checkpoint holds none), so the run differs a little from one that was "
                   "not interrupted\n");
        fflush(stdout);
        if (o.metrics) {
            metrics = fopen(o.metrics, "w");
            if (!metrics) {
                snprintf(err, sizeof(err), "cannot write --metrics '%s': %s", o.metrics,
                         strerror(errno));
                goto out_err;
            }
            fprintf(metrics, "step,epoch,train_loss,test_accuracy,test_loss,compute_ms,comm_ms,"
                             "wait_ms,bytes_sent_rank0\n");
        }
    }

    r.comm_s = r.wait_s = 0; /* the run's accounting starts with its steps */
    run_t0 = epoch_t0 = now_s();
    double epoch_loss = 0, epoch_samples = 0;
    for (;;) {
        if (o.elastic && el.need_sync &&
            el_sync(&r, &el, &o, &m, &opt, &dl, &step, err, sizeof(err)) != 0)
            goto recover;
        if (step >= total_steps)
            break;
        if (o.elastic) {
            /* every member is at the same step between syncs, so all look alike */
            if (step % o.join_every == 0 && el_admit(&r, &el, &o, step))
                continue; /* a grown comm: sync first */
            if (r.failed)
                goto recover;
            el.reached = step + 1;
        }
        d.step = dl.step = step;
        int epoch = (int)(step / steps_per_epoch);
        long pos = step % steps_per_epoch;
        double t0 = now_s(), comm0 = r.comm_s, wait0 = r.wait_s, loss = 0;
        int begin, end;
        float scale = 1.0f / ((float)o.batch * o.accum);

        if (epoch != perm_epoch) {
            sampler_permute(perm, train.n, o.seed, epoch);
            perm_epoch = epoch;
        }
        memset(m.grads, 0, m.nparams * sizeof(float));
        sampler_slice(o.batch, r.rank, r.nranks, &begin, &end);
        if (o.diloco) /* workers step alone: the mean over their own samples */
            scale = 1.0f / ((float)(end - begin) * o.accum);
        for (int a = 0; a < o.accum; a++) {
            long first = (pos * o.accum + a) * (long)o.batch;
            long correct = 0;
            int n = end - begin;

            gather_batch(&train, perm + first + begin, n, xb, yb);
            loss += mlp_forward(&m, xb, yb, n, &correct);
            d.sync = a == o.accum - 1 && !o.diloco;
            mlp_backward(&m, yb, n, scale, ddp_layer_done, &d);
        }
        ddp_wait_all(&d);
        if (r.failed) /* the gradients are not the global ones: no step with them */
            goto recover;
        if (o.cosine) /* a function of the step alone, so a resumed run follows it too */
            opt.lr = o.lr * 0.5 * (1.0 + cos(M_PI * (double)step / (double)total_steps));
        optim_step(&opt, m.params, m.grads, m.nparams);
        if (o.diloco) /* the last step syncs everything, so all replicas end equal */
            diloco_step(&dl, &r, &m, &o, step + 1, step + 1 == total_steps);
        if (r.failed)
            goto recover;

        double comm = r.comm_s - comm0, wait = r.wait_s - wait0;
        double compute = now_s() - t0 - comm - wait;
        tot_compute += compute;
        tot_comm += comm;
        tot_wait += wait;
        epoch_loss += loss;
        epoch_samples += end - begin;
        if (r.rank == 0)
            hist_step(&hist, compute, comm, wait, loss / ((end - begin) * (double)o.accum));

        bool last = step + 1 == total_steps;
        bool epoch_end = (step + 1) % steps_per_epoch == 0;
        if ((o.log_every && (step + 1) % o.log_every == 0) || (!o.log_every && epoch_end)) {
            double t[2] = {epoch_loss, epoch_samples};
            allreduce_doubles(&r, t, 2);
            if (r.failed)
                goto recover_done; /* the step itself is done */
            if (r.rank == 0)
                printf("step %ld epoch %d: train loss %.4f (mean since last report); step "
                       "compute %.2f ms, comm %.2f ms, wait %.2f ms\n", step + 1, epoch,
                       t[0] / t[1], compute * 1e3, comm * 1e3, wait * 1e3);
            if (metrics)
                fprintf(metrics, "%ld,%d,%.6f,,,%.4f,%.4f,%.4f,%.0f\n", step + 1, epoch,
                        t[0] / t[1], compute * 1e3, comm * 1e3, wait * 1e3, bytes_sent(&r));
            epoch_loss = epoch_samples = 0;
        }
        if (epoch_end) {
            double dt = now_s() - epoch_t0;
            epoch_time_sum += dt;
            epochs_timed++;
            if (r.rank == 0)
                printf("epoch %d done in %.2f s\n", epoch, dt);
        }
        if ((o.eval_every && (step + 1) % o.eval_every == 0) ||
            (!o.eval_every && epoch_end) || last) {
            evaluate(&r, &m, &test, xb, yb, &acc, &test_loss);
            if (r.failed)
                goto recover_done;
            acc_step = step + 1;
            if (r.rank == 0) {
                printf("step %ld: test accuracy %.4f, test loss %.4f\n", step + 1, acc,
                       test_loss);
                hist_eval(&hist, (double)(step + 1), acc, bytes_sent(&r));
                if (metrics)
                    fprintf(metrics, "%ld,%d,,%.6f,%.6f,,,,%.0f\n", step + 1, epoch, acc,
                            test_loss, bytes_sent(&r));
            }
        }
        if (o.ckpt && ((o.ckpt_every && (step + 1) % o.ckpt_every == 0) || last) &&
            save_checkpoint(&r, &o, &m, &opt, &dl, (uint64_t)(step + 1), rng.s, err,
                            sizeof(err)) != 0)
            goto out_err;
        if (r.failed)
            goto recover_done;
        fflush(stdout);
        if (epoch_end)
            epoch_t0 = now_s(); /* evaluation and checkpoints are not the epoch's time */
        if (o.stop_after && step + 1 == o.stop_after && !last) {
            /* As a crash would: no final sync, so DiLoCo replicas still differ. The
             * outer all-reduces in flight are drained so the comm closes cleanly. */
            for (int f = 0; o.diloco && f < dl.nfrag; f++)
                if (dl.pending[f])
                    diloco_reduced(&dl, &r, f);
            if (r.rank == 0)
                printf("dptrain: stopped after step %ld (--stop-after)\n", o.stop_after);
            ret = 0;
            goto out_free;
        }
        step++;
        continue;
    recover_done:
        step++; /* this rank finished the step; the sync decides where all go on */
    recover:
        for (int k = 0; k < d.nbuckets; k++)
            d.b[k].req = NULL; /* freed with the failed comm */
        el_recover(&r, &el);
    }
    /* elastic: an evaluation of the last step lost to a failure is done again */
    while (o.elastic && acc_step != total_steps) {
        evaluate(&r, &m, &test, xb, yb, &acc, &test_loss);
        if (!r.failed) {
            acc_step = total_steps;
            if (r.rank == 0)
                printf("step %ld: test accuracy %.4f, test loss %.4f\n", total_steps, acc,
                       test_loss);
            break;
        }
        el_recover(&r, &el);
        while (el_sync(&r, &el, &o, &m, &opt, &dl, &step, err, sizeof(err)) != 0)
            el_recover(&r, &el);
        if (step < total_steps) {
            snprintf(err, sizeof(err), "a recovery after the last step went back to step "
                     "%ld", step);
            goto out_err;
        }
    }

    /* Every replica must hold the same parameters now (DDP: always; DiLoCo: after the
     * final sync). Bitwise: the max and min of a fingerprint over the ranks must agree. */
    {
        double cs = mlp_checksum(&m), mm[2] = {cs, -cs};
        coll_status_t cst;
        if (r.comm) {
            cst = coll_allreduce(mm, mm, 2, COLL_FLOAT64, COLL_MAX, r.comm);
            if (cst != COLL_SUCCESS && o.elastic) {
                /* the sync after the recovery checks the replicas bit for bit itself */
                die_coll(&r, cst, "coll_allreduce (replica check)");
                el_recover(&r, &el);
                while (el_sync(&r, &el, &o, &m, &opt, &dl, &step, err, sizeof(err)) != 0)
                    el_recover(&r, &el);
                mm[0] = cs;
                mm[1] = -cs;
            } else if (cst != COLL_SUCCESS) {
                die_coll(&r, cst, "coll_allreduce (replica check)");
            }
        }
        if (mm[0] != -mm[1]) {
            snprintf(err, sizeof(err), "replicas differ at the end: parameter checksums range "
                     "from %.17g to %.17g", -mm[1], mm[0]);
            goto out_err;
        }
        if (r.rank == 0)
            printf("replicas: all %d hold identical parameters\n", r.nranks);
    }
    if (r.rank == 0) {
        long steps = total_steps - start_step;
        double wall = now_s() - run_t0;
        /* The log lines give one step each; these are means over the run's steps, of the
         * steps alone: evaluations, checkpoints and the log are in the wall time only. */
        printf("summary: %ld steps in %.2f s (evaluations and checkpoints included); per step, "
               "mean over the steps alone: compute %.3f ms, communication %.3f ms (inside coll "
               "calls), waiting %.3f ms (coll_wait)\n", steps, wall,
               steps ? tot_compute / steps * 1e3 : 0, steps ? tot_comm / steps * 1e3 : 0,
               steps ? tot_wait / steps * 1e3 : 0);
        printf("summary: all-reduce/broadcast payload %.1f MB (fp32), bytes sent by rank 0 "
               "%.3f MB (coll_comm_bytes_sent)\n", r.payload_bytes / 1e6,
               bytes_sent(&r) / 1e6);
        if (epochs_timed)
            printf("summary: %.3f s per epoch (mean of %d), final test accuracy %.4f\n",
                   epoch_time_sum / epochs_timed, epochs_timed, acc);
        else
            printf("summary: final test accuracy %.4f\n", acc);
        if (o.diloco)
            printf("summary: DiLoCo: %ld fragment syncs of %d fragment(s)\n", dl.syncs,
                   dl.nfrag);
        printf("weights: step %ld norm %.9g checksum %.9g\n", total_steps, mlp_norm(&m),
               mlp_checksum(&m));
        if (o.elastic)
            printf("summary: elastic: %d recovery(ies), %d grow(s), %d ranks at the end\n",
                   el.recoveries, el.grows, r.nranks);
        fflush(stdout);
        if (o.plot && write_plots(o.plot, &hist, start_step, r.nranks) != 0)
            goto out_free;
        if (o.dump_weights && dump_weights(o.dump_weights, &m) != 0)
            goto out_free;
        if (o.check_weights) {
            ret = check_weights(o.check_weights, &m, o.tol);
            goto out_free;
        }
    }
    ret = 0;
    goto out_free;

out_err:
    fprintf(stderr, "dptrain: rank %d: %s\n", r.rank, err);
    ret = 1;
out_free:
    if (metrics && (ferror(metrics) | (fclose(metrics) != 0))) {
        fprintf(stderr, "dptrain: error writing --metrics '%s'\n", o.metrics);
        ret = 1;
    }
    free(hist.step_compute);
    free(hist.step_comm);
    free(hist.step_wait);
    free(hist.step_loss);
    free(hist.eval_step);
    free(hist.eval_acc);
    free(hist.eval_bytes);
    diloco_free(&dl);
    for (int k = 0; k < d.nbuckets; k++)
        coll_quant_feedback_destroy(d.b[k].fb);
    qworker_fini(&qw);
    free(perm);
    free(xb);
    free(yb);
    optim_free(&opt);
    mlp_free(&m);
    dataset_free(&train);
    dataset_free(&test);
out_comm:
    coll_comm_destroy(r.comm);
    free(el.pids);
    elastic_close(&el.dir);
    return ret;
}
