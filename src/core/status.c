/* ddp_status_t to text, generated from the single list in status.h. */
#include "ddptrain/status.h"

const char *ddp_status_string(ddp_status_t st) {
  switch (st) {
#define DDP_STATUS_DESC_(name, value, desc) \
  case name:                                \
    return desc;
    DDP_STATUS_LIST(DDP_STATUS_DESC_)
#undef DDP_STATUS_DESC_
  }
  return "unknown status";
}

const char *ddp_status_name(ddp_status_t st) {
  switch (st) {
#define DDP_STATUS_NAME_(name, value, desc) \
  case name:                                \
    return #name;
    DDP_STATUS_LIST(DDP_STATUS_NAME_)
#undef DDP_STATUS_NAME_
  }
  return "unknown status";
}
