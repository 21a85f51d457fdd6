"""The NPU families, one package each: a family lives in its package (and its driver's
dkms/<package>.yaml, patches/ and provision/ folders). npuctl.families finds them;
npuctl.platform is the interface each one's PLATFORM fills in."""
