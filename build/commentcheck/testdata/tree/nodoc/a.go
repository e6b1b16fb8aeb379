package nodoc
