package jsonscan
