/*
 * settings_test.h - a test's hook into src/core/settings.c: let this process's ranks keep
 * their own per-comm settings instead of rank 0's, so that a test can make ranks decide
 * differently how to run one call (which agreeing at creation otherwise rules out) and see
 * the agreement check name both decisions.
 */
#ifndef COLL_SETTINGS_TEST_H
#define COLL_SETTINGS_TEST_H

#include "../base/base.h"

/* On: the comms this process creates from now on warn about differing settings but keep
 * this rank's own values. */
COLL_INTERNAL void coll__settings_test_keep_own(bool on);

#endif /* COLL_SETTINGS_TEST_H */
